// Flat YAML / TOML config files: accepted syntax and every error, with the exact messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/config_file.h"
#include "core/error.h"

namespace hytra {
namespace {

using Values = std::vector<std::string>;

ConfigFile yaml(const std::string& text) { return parse_config_text(text, ConfigFormat::Yaml, "c.yaml"); }
ConfigFile toml(const std::string& text) { return parse_config_text(text, ConfigFormat::Toml, "c.toml"); }

std::string error_of(ConfigFormat f, const std::string& text) {
  try {
    parse_config_text(text, f, f == ConfigFormat::Yaml ? "c.yaml" : "c.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
std::string yaml_error(const std::string& text) { return error_of(ConfigFormat::Yaml, text); }
std::string toml_error(const std::string& text) { return error_of(ConfigFormat::Toml, text); }

void expect_entry(const ConfigEntry& e, const std::string& key, const Values& values, int line) {
  EXPECT_EQ(e.key, key);
  EXPECT_EQ(e.values, values) << key;
  EXPECT_EQ(e.line, line) << key;
}

TEST(ConfigFile, YamlScalarsListsCommentsQuotes) {
  ConfigFile f = yaml(
      "# a recipe\n"
      "---\n"
      "num_layers: 4   # comment\n"
      "hidden-size: 256\n"
      "\n"
      "lr: 3.0e-4\n"
      "bf16: true\n"
      "data-path: [0.3, \"a b#c\", 'it''s', plain text]\n"
      "recompute_modules:\n"
      "  - core_attn   # first\n"
      "\n"
      "  - 'moe_act'\n"
      "  - mlp\n"
      "tokenizer-type: \"GPT2 \\\"BPE\\\"\\tx\"\n"
      "note: don't#strip\n"
      "empty: []\n"
      "multi: [1,\n"
      "        2]\n");
  EXPECT_EQ(f.path, "c.yaml");
  ASSERT_EQ(f.entries.size(), 10u);
  expect_entry(f.entries[0], "num-layers", {"4"}, 3);
  expect_entry(f.entries[1], "hidden-size", {"256"}, 4);
  expect_entry(f.entries[2], "lr", {"3.0e-4"}, 6);
  expect_entry(f.entries[3], "bf16", {"true"}, 7);
  expect_entry(f.entries[4], "data-path", {"0.3", "a b#c", "it's", "plain text"}, 8);
  expect_entry(f.entries[5], "recompute-modules", {"core_attn", "moe_act", "mlp"}, 9);
  expect_entry(f.entries[6], "tokenizer-type", {"GPT2 \"BPE\"\tx"}, 14);
  expect_entry(f.entries[7], "note", {"don't#strip"}, 15);
  expect_entry(f.entries[8], "empty", {}, 16);
  expect_entry(f.entries[9], "multi", {"1", "2"}, 17);
}

TEST(ConfigFile, TomlScalarsArraysComments) {
  ConfigFile f = toml(
      "# a recipe\n"
      "num_layers = 4 # comment\n"
      "  lr=3e-4\n"
      "train-iters = 1_000\n"
      "swiglu = false\n"
      "tokenizer_type = \"GPT2BPETokenizer\"\n"
      "path = 'C:\\raw\\#x'\n"
      "\"quoted_key\" = -1.5\n"
      "split = [969, 30, 1,]\n"
      "modules = [\n"
      "  \"core_attn\",  # one\n"
      "  'mlp',\n"
      "]\n"
      "none = []\n");
  ASSERT_EQ(f.entries.size(), 10u);
  expect_entry(f.entries[0], "num-layers", {"4"}, 2);
  expect_entry(f.entries[1], "lr", {"0.0003"}, 3);
  expect_entry(f.entries[2], "train-iters", {"1000"}, 4);
  expect_entry(f.entries[3], "swiglu", {"false"}, 5);
  expect_entry(f.entries[4], "tokenizer-type", {"GPT2BPETokenizer"}, 6);
  expect_entry(f.entries[5], "path", {"C:\\raw\\#x"}, 7);
  expect_entry(f.entries[6], "quoted-key", {"-1.5"}, 8);
  expect_entry(f.entries[7], "split", {"969", "30", "1"}, 9);
  expect_entry(f.entries[8], "modules", {"core_attn", "mlp"}, 10);
  expect_entry(f.entries[9], "none", {}, 14);
}

TEST(ConfigFile, YamlDetails) {
  // An unindented block list, an empty file, a block scalar (kept with its newline for the flag table
  // to judge), a tag.
  expect_entry(yaml("a:\n- x\n- y\n").entries[0], "a", {"x", "y"}, 1);
  EXPECT_TRUE(yaml("# nothing\n").entries.empty());
  EXPECT_TRUE(yaml("").entries.empty());
  EXPECT_EQ(yaml("a: |\n  text\n").entries[0].values, Values{"text\n"});
  EXPECT_EQ(yaml("a: !!str 3\n").entries[0].values, Values{"3"});
}

TEST(ConfigFile, TomlValuesAsText) {
  // Integers in decimal; floats as %g-style shortest round-trip text, whole ones keeping ".0" so an
  // integer flag refuses them; strings marked quoted, per element in arrays.
  ConfigFile f = toml(
      "hex = 0x10\n"
      "lr = 3e-4\n"
      "whole = 4.0\n"
      "big = 1e20\n"
      "neg = -0.5\n"
      "mixed = [1, \"a\", 2.5, true]\n"
      "s = \"\"\"x\"\"\"\n");
  ASSERT_EQ(f.entries.size(), 7u);
  expect_entry(f.entries[0], "hex", {"16"}, 1);
  expect_entry(f.entries[1], "lr", {"0.0003"}, 2);
  expect_entry(f.entries[2], "whole", {"4.0"}, 3);
  expect_entry(f.entries[3], "big", {"1e+20"}, 4);
  expect_entry(f.entries[4], "neg", {"-0.5"}, 5);
  expect_entry(f.entries[5], "mixed", {"1", "a", "2.5", "true"}, 6);
  EXPECT_EQ(f.entries[5].quoted, (std::vector<bool>{false, true, false, false}));
  expect_entry(f.entries[6], "s", {"x"}, 7);
  EXPECT_EQ(f.entries[6].quoted, std::vector<bool>{true});
  EXPECT_EQ(f.entries[0].quoted, std::vector<bool>{false});
}

TEST(ConfigFile, KeyNormalisation) {
  EXPECT_EQ(normalize_config_key("num_layers"), "num-layers");
  EXPECT_EQ(normalize_config_key("--lr_decay-style"), "lr-decay-style");
  EXPECT_EQ(yaml("--lr: 1\n").entries[0].key, "lr");
}

// The flat-file rules are hytra's (exact messages); syntax errors carry yaml-cpp's / toml++'s message
// and the offending line.
TEST(ConfigFile, YamlErrors) {
  const std::string flat = " (the file must be flat 'key: value' lines)";
  EXPECT_EQ(yaml_error("a: 1\nmodel:\n  hidden: 3\n"),
            "c.yaml:3: model: expected a value, a [list] or '- item' lines, got a nested mapping" + flat);
  EXPECT_EQ(yaml_error("a: {b: 1}\n"),
            "c.yaml:1: a: expected a value, a [list] or '- item' lines, got a nested mapping" + flat);
  EXPECT_EQ(yaml_error("a:\n  - x: 1\n"), "c.yaml:2: a: expected a list element, got a nested mapping" + flat);
  EXPECT_EQ(yaml_error("{a: 1}: 2\n"), "c.yaml:1: expected a key, got a nested mapping" + flat);
  EXPECT_EQ(yaml_error("num_layers: 2\nnum-layers: 3\n"), "c.yaml:2: duplicate key 'num-layers' (first set at line 1)");
  EXPECT_EQ(yaml_error("lr: 1\n\nlr: 1\n"), "c.yaml:3: duplicate key 'lr' (first set at line 1)");
  EXPECT_EQ(yaml_error("\nlr 3\n"), "c.yaml:2: expected 'key: value' lines, got 'lr 3'");
  EXPECT_EQ(yaml_error("lr:3\n"), "c.yaml:1: expected 'key: value' lines, got 'lr:3'");
  EXPECT_EQ(yaml_error("- a\n"), "c.yaml:1: expected 'key: value' lines, got a list");
  EXPECT_EQ(yaml_error("a: 1\n---\nb: 2\n"), "c.yaml:3: expected one document, got a second one ('---')");
  EXPECT_EQ(yaml_error("a:\nb: 1\n"), "c.yaml:1: a: expected a value, a [list] or '- item' lines, got nothing");
  EXPECT_EQ(yaml_error("a: ~\n"), "c.yaml:1: a: expected a value, a [list] or '- item' lines, got nothing");
  EXPECT_EQ(yaml_error("a:\n  -\n"), "c.yaml:1: a: expected a list element, got nothing");
  EXPECT_EQ(yaml_error("a: [1, , 2]\n"), "c.yaml:1: a: expected a list element, got nothing");
  EXPECT_EQ(yaml_error("a: [1, [2]]\n"),
            "c.yaml:1: a: expected a list element, got a nested list (lists hold scalars)");
  EXPECT_EQ(yaml_error("a b: 1\n"), "c.yaml:1: expected a key of letters, digits, '-' or '_', got 'a b'");
  // An unclosed quote is an error, not a value running to the end of the file (yaml-cpp 0.7 alone
  // would read `a` as "abc b: 1 ").
  EXPECT_EQ(yaml_error("a: \"abc\nb: 1\n"), "c.yaml:1: unterminated string: expected a closing \"");
  EXPECT_EQ(yaml_error("a: 'it''s\nb: 1\n"), "c.yaml:1: unterminated string: expected a closing '");
  EXPECT_EQ(yaml("a: \"x\n  y\"\n").entries[0].values, Values{"x y"});  // a closed multi-line string is fine
  // Syntax errors.
  EXPECT_EQ(yaml_error("a: b: 1\n"), "c.yaml:1: illegal map value in 'a: b: 1'");
  EXPECT_EQ(yaml_error("a: 1\n  b: 2\n"), "c.yaml:2: illegal map value in 'b: 2'");
  EXPECT_EQ(yaml_error("a: [1, 2\nb: 3\n"), "c.yaml:2: end of sequence flow not found in 'b: 3'");
  EXPECT_EQ(yaml_error("a: [1] x\n"), "c.yaml:1: end of map not found in 'a: [1] x'");
  EXPECT_EQ(yaml_error("a: \"ab\" c\n"), "c.yaml:1: end of map not found in 'a: \"ab\" c'");
  EXPECT_EQ(yaml_error("a: \"\\q\"\n"), "c.yaml:1: unknown escape character: q in 'a: \"\\q\"'");
}

// Inputs the parsers would never return from (yaml-cpp 0.7) or abort on (toml++ 3), found by tests/fuzz, refused
// first with a line number; the same characters where they are fine still parse.
TEST(ConfigFile, InputsThatWouldHangOrAbortTheParsersAreNamedErrors) {
  EXPECT_EQ(yaml_error(",07 "), "c.yaml:1: a line cannot start with ','");
  EXPECT_EQ(yaml_error("# a run\n\n  , x"), "c.yaml:3: a line cannot start with ','");
  EXPECT_EQ(yaml_error("'x'\n,"), "c.yaml:2: a line cannot start with ','");
  EXPECT_EQ(yaml_error("\"x\","), "c.yaml:1: ',' outside [...]: expected a key or a value");
  EXPECT_EQ(yaml_error("[1],"), "c.yaml:1: ',' outside [...]: expected a key or a value");
  EXPECT_EQ(parse_config_text("split: 99,1,0\nname: it's, fine\ndata-path: [a, b]\n", ConfigFormat::Yaml, "c.yaml")
                .entries.size(),
            3u);
  EXPECT_EQ(parse_config_text("data-path: [\n  \"a\",\n  'b' ,\n  c]\n", ConfigFormat::Yaml, "c.yaml").entries.size(),
            1u);
  EXPECT_EQ(toml_error(std::string("[=\0{lv = 3\n", 11)), "c.toml:1: a malformed table header (expected a key after '[')");
  EXPECT_EQ(toml_error("[ =x]\n"), "c.toml:1: a malformed table header (expected a key after '[')");
  EXPECT_EQ(parse_config_text("data-path = [\n  \"a\",\n  \"b\"]\n", ConfigFormat::Toml, "c.toml").entries.size(), 1u);
}

TEST(ConfigFile, TomlErrors) {
  const std::string table = "got a table (nested tables are not supported: use flat 'key = value' lines)";
  const std::string value = "expected a value (a string, number, true/false or [array]), ";
  EXPECT_EQ(toml_error("a = 1\n[model]\nb = 2\n"), "c.toml:2: model: " + value + table);
  EXPECT_EQ(toml_error("model.hidden = 3\n"), "c.toml:1: model: " + value + table);
  EXPECT_EQ(toml_error("a = {b = 1}\n"), "c.toml:1: a: " + value + table);
  EXPECT_EQ(toml_error("[[layers]]\n"),
            "c.toml:1: layers: expected an array element (a string, number, true/false), " + table);
  EXPECT_EQ(toml_error("a = [1, [2]]\n"),
            "c.toml:1: a: expected an array element (a string, number, true/false), got a nested array (arrays "
            "hold scalars)");
  EXPECT_EQ(toml_error("d = 1979-05-27\n"), "c.toml:1: d: " + value + "got a date or time");
  EXPECT_EQ(toml_error("num_layers = 2\nnum-layers = 3\n"),
            "c.toml:2: duplicate key 'num-layers' (first set at line 1)");
  EXPECT_EQ(toml_error("\"a b\" = 1\n"), "c.toml:1: expected a key of letters, digits, '-' or '_', got 'a b'");
  // Syntax errors.
  EXPECT_EQ(toml_error("lr = 1\nlr = 2\n"),
            "c.toml:2: Error while parsing key-value pair: cannot redefine existing integer 'lr' in 'lr = 2'");
  EXPECT_EQ(toml_error("tokenizer = GPT2\n"),
            "c.toml:1: Error while parsing value: could not determine value type (TOML strings are quoted) in "
            "'tokenizer = GPT2'");
  EXPECT_EQ(toml_error("a = \n"), "c.toml:1: Error while parsing key-value pair: expected value, saw '\\n' in 'a ='");
  EXPECT_EQ(toml_error("just words\n"),
            "c.toml:1: Error while parsing key-value pair: expected '=', saw 'w' in 'just words'");
  EXPECT_EQ(
      toml_error("= 3\n"),
      "c.toml:1: Error while parsing root table: expected keys, tables, whitespace or comments, saw '=' in '= 3'");
  EXPECT_EQ(toml_error("a = [1,\n2\n"), "c.toml:2: Error while parsing array: encountered end-of-file in '2'");
  EXPECT_EQ(toml_error("a = 'x' y\n"),
            "c.toml:1: Error while parsing key-value pair: expected a comment or whitespace, saw 'y' in 'a = 'x' y'");
}

class ConfigFileOnDisk : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() / ("hytra_cfg_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(ConfigFileOnDisk, FormatFromExtension) {
  EXPECT_EQ(read_config_file(write("a.yaml", "lr: 1\n")).entries[0].values, Values{"1"});
  EXPECT_EQ(read_config_file(write("a.yml", "lr: 2\n")).entries[0].values, Values{"2"});
  EXPECT_EQ(read_config_file(write("a.toml", "lr = 3\n")).entries[0].values, Values{"3"});
  const std::string json = write("a.json", "{}");
  try {
    read_config_file(json);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--config " + json + ": unknown format: expected a .yaml, .yml or .toml file");
  }
  const std::string missing = (dir_ / "missing.toml").string();
  try {
    read_config_file(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--config " + missing + ": cannot open the file");
  }
  const std::string bad = write("bad.yaml", "a: 1\nb: [\n");
  try {
    read_config_file(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), bad + ":3: end of sequence flow not found");
  }
}

}  // namespace
}  // namespace hytra
