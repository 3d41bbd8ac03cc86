// Flat YAML / TOML config files: accepted syntax and every error, with the exact messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "cli/config_file.h"

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
      "- mlp\n"
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
  expect_entry(f.entries[1], "lr", {"3e-4"}, 3);
  expect_entry(f.entries[2], "train-iters", {"1000"}, 4);
  expect_entry(f.entries[3], "swiglu", {"false"}, 5);
  expect_entry(f.entries[4], "tokenizer-type", {"GPT2BPETokenizer"}, 6);
  expect_entry(f.entries[5], "path", {"C:\\raw\\#x"}, 7);
  expect_entry(f.entries[6], "quoted-key", {"-1.5"}, 8);
  expect_entry(f.entries[7], "split", {"969", "30", "1"}, 9);
  expect_entry(f.entries[8], "modules", {"core_attn", "mlp"}, 10);
  expect_entry(f.entries[9], "none", {}, 14);
}

TEST(ConfigFile, KeyNormalisation) {
  EXPECT_EQ(normalize_config_key("num_layers"), "num-layers");
  EXPECT_EQ(normalize_config_key("--lr_decay-style"), "lr-decay-style");
  EXPECT_EQ(yaml("--lr: 1\n").entries[0].key, "lr");
}

TEST(ConfigFile, YamlErrors) {
  EXPECT_EQ(
      yaml_error("a: 1\nmodel:\n  hidden: 3\n"),
      "c.yaml:3: nested mapping under 'model' not supported (the file must be flat 'key: value' lines)");
  EXPECT_EQ(yaml_error("a: {b: 1}\n"),
            "c.yaml:1: nested mapping {b: 1} not supported (the file must be flat)");
  EXPECT_EQ(yaml_error("a: b: 1\n"),
            "c.yaml:1: nested mapping 'b: 1' not supported (the file must be flat 'key: value' lines)");
  EXPECT_EQ(yaml_error("a:\n  - x: 1\n"),
            "c.yaml:2: nested mapping 'x: 1' not supported (the file must be flat 'key: value' lines)");
  EXPECT_EQ(yaml_error("num_layers: 2\nnum-layers: 3\n"),
            "c.yaml:2: duplicate key 'num-layers' (first set at line 1)");
  EXPECT_EQ(yaml_error("\nlr 3\n"), "c.yaml:2: expected 'key: value', got 'lr 3'");
  EXPECT_EQ(yaml_error("lr:3\n"), "c.yaml:1: expected 'key: value', got 'lr:3'");
  EXPECT_EQ(yaml_error("a: 1\n  b: 2\n"),
            "c.yaml:2: unexpected indentation: expected 'key: value' at column 1, got 'b: 2'");
  EXPECT_EQ(yaml_error("\ta: 1\n"), "c.yaml:1: tabs are not allowed for indentation");
  EXPECT_EQ(yaml_error("- a\n"), "c.yaml:1: expected 'key: value', got a list item without a key: '- a'");
  EXPECT_EQ(yaml_error("a:\nb: 1\n"), "c.yaml:1: expected a value or '- item' lines after 'a:'");
  EXPECT_EQ(yaml_error("a:\n  -\n"), "c.yaml:2: expected a list element");
  EXPECT_EQ(yaml_error("a b: 1\n"), "c.yaml:1: expected a key of letters, digits, '-' or '_', got 'a b'");
  EXPECT_EQ(yaml_error("a: [1, [2]]\n"), "c.yaml:1: nested list [2] not supported (lists hold scalars)");
  EXPECT_EQ(yaml_error("a: [1, , 2]\n"), "c.yaml:1: expected a list element");
  EXPECT_EQ(yaml_error("a: [1, 2\nb: 3\n"), "c.yaml:1: unterminated list: expected ']'");
  EXPECT_EQ(yaml_error("a: [1] x\n"), "c.yaml:1: expected nothing after ']', got 'x'");
  EXPECT_EQ(yaml_error("a: \"abc\n"), "c.yaml:1: unterminated string \"abc");
  EXPECT_EQ(yaml_error("a: \"ab\" c\n"), "c.yaml:1: expected nothing after the closing quote, got 'c'");
  EXPECT_EQ(yaml_error("a: \"\\q\"\n"), "c.yaml:1: unsupported escape '\\q' in \"\\q\"");
  EXPECT_EQ(yaml_error("a: |\n  text\n"),
            "c.yaml:1: block scalars ('|', '>') not supported: write the value on one line");
}

TEST(ConfigFile, TomlErrors) {
  EXPECT_EQ(toml_error("a = 1\n[model]\nb = 2\n"),
            "c.toml:2: table [model]: nested tables are not supported (use flat 'key = value' lines)");
  EXPECT_EQ(toml_error("[[layers]]\n"),
            "c.toml:1: table [[layers]]: nested tables are not supported (use flat 'key = value' lines)");
  EXPECT_EQ(
      toml_error("model.hidden = 3\n"),
      "c.toml:1: dotted key 'model.hidden' is a nested table: nested tables are not supported (use flat "
      "'key = value' lines)");
  EXPECT_EQ(toml_error("a = {b = 1}\n"),
            "c.toml:1: inline table (nested table) {b = 1} not supported (the file must be flat)");
  EXPECT_EQ(toml_error("lr = 1\nlr = 2\n"), "c.toml:2: duplicate key 'lr' (first set at line 1)");
  EXPECT_EQ(toml_error("tokenizer = GPT2\n"),
            "c.toml:1: expected a quoted string, number, true/false or [array], got 'GPT2'");
  EXPECT_EQ(toml_error("a = \n"), "c.toml:1: expected a value after 'a ='");
  EXPECT_EQ(toml_error("just words\n"), "c.toml:1: expected 'key = value', got 'just words'");
  EXPECT_EQ(toml_error("= 3\n"), "c.toml:1: expected a key before the separator");
  EXPECT_EQ(toml_error("a = \"\"\"x\"\"\"\n"), "c.toml:1: multi-line strings not supported");
  EXPECT_EQ(toml_error("a = [1, [2]]\n"), "c.toml:1: nested list [2] not supported (lists hold scalars)");
  EXPECT_EQ(toml_error("a = [1,\n2\n"), "c.toml:1: unterminated list: expected ']'");
  EXPECT_EQ(toml_error("a = 'x' y\n"), "c.toml:1: expected nothing after the closing quote, got 'y'");
}

class ConfigFileOnDisk : public ::testing::Test {
 protected:
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("hytra_cfg_" + std::to_string(::getpid()));
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
    EXPECT_EQ(std::string(e.what()),
              "--config " + json + ": unknown format: expected a .yaml, .yml or .toml file");
  }
  const std::string missing = (dir_ / "missing.toml").string();
  try {
    read_config_file(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--config " + missing + ": cannot open the file");
  }
  const std::string bad = write("bad.yaml", "a: 1\nb\n");
  try {
    read_config_file(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), bad + ":2: expected 'key: value', got 'b'");
  }
}

}  // namespace
}  // namespace hytra
