// FlagTable: argv forms, config-then-flags order, suggestions, type errors and the help table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "cli/flag_table.h"

namespace hytra {
namespace {

using Kind = FlagSpec::Kind;
using Strings = std::vector<std::string>;

// A small stand-in for the trainer's configs, with one row per field.
struct Fields {
  double lr = 0.0;
  int64_t seed = 1234;
  int num_layers = 0;
  bool bf16 = false;
  std::string decay_style = "linear";
  std::vector<std::string> data_path;
  std::vector<int64_t> rampup;
  std::optional<int64_t> save_interval;
  std::vector<double> weights;
  Strings log;  // setter calls in order, "name=v1,v2"
};

FlagSpec row(const std::string& name, Kind kind, Binding binding, Fields& f) {
  std::function<void(const FlagValues&)> set = std::move(binding.set);
  FlagSpec s;
  s.name = name;
  s.kind = kind;
  s.set = [name, set, &f](const FlagValues& v) {
    std::string entry = name + "=";
    for (size_t i = 0; i < v.size(); ++i) entry += (i ? "," : "") + v[i];
    f.log.push_back(entry);
    set(v);
  };
  return s;
}

FlagTable make_table(Fields& f, std::string positionals = "") {
  FlagTable t(std::move(positionals));
  t.add(row("--lr", Kind::Float, store(f.lr), f));
  t.add(row("--seed", Kind::Int, store(f.seed), f));
  t.add(row("--num-layers", Kind::Int, store(f.num_layers), f));
  t.add(row("--bf16", Kind::Bool, store(f.bf16), f));
  FlagSpec style = row("--lr-decay-style", Kind::String, store(f.decay_style), f);
  style.choices = {"constant", "linear", "cosine"};
  t.add(style);
  t.add(row("--data-path", Kind::StringList, store(f.data_path), f));
  FlagSpec ramp = row("--rampup-batch-size", Kind::IntList, store(f.rampup), f);
  ramp.min_values = ramp.max_values = 3;
  t.add(ramp);
  FlagSpec save = row("--save-interval", Kind::Int, store(f.save_interval), f);
  save.aliases = {"--persistent-save-interval"};
  t.add(save);
  t.add(row("--weights", Kind::FloatList, store(f.weights), f));
  return t;
}

std::string parse_error(const Strings& args) {
  Fields f;
  FlagTable t = make_table(f);
  try {
    t.parse(args);
  } catch (const Error& e) {
    EXPECT_TRUE(f.log.empty()) << "a setter ran before the error";
    return e.what();
  }
  return "no error";
}

TEST(FlagTable, SpaceAndEqualsFormsBoolsListsNegatives) {
  Fields f;
  FlagTable t = make_table(f);
  auto r = t.parse({"--lr", "3e-4", "--seed=-7", "--num_layers", "12", "--bf16", "--data-path", "0.3", "a",
                    "-0.7", "b", "--rampup-batch-size", "32", "32", "1000", "--lr-decay-style=cosine",
                    "--persistent-save-interval", "500", "--weights=-1.5"});
  EXPECT_FALSE(r.help);
  EXPECT_TRUE(r.positionals.empty());
  EXPECT_EQ(f.lr, 3e-4);
  EXPECT_EQ(f.seed, -7);
  EXPECT_EQ(f.num_layers, 12);
  EXPECT_TRUE(f.bf16);
  EXPECT_EQ(f.data_path, (Strings{"0.3", "a", "-0.7", "b"}));
  EXPECT_EQ(f.rampup, (std::vector<int64_t>{32, 32, 1000}));
  EXPECT_EQ(f.decay_style, "cosine");
  EXPECT_EQ(f.save_interval, std::optional<int64_t>(500));
  EXPECT_EQ(f.weights, (std::vector<double>{-1.5}));
  EXPECT_TRUE(t.is_set("--save-interval"));
  EXPECT_TRUE(t.is_set("--persistent-save-interval"));
  EXPECT_TRUE(t.is_set("--bf16"));
  Fields g;
  FlagTable u = make_table(g);
  u.parse({"--bf16=false", "--lr", "1", "--lr", "2"});  // repeated flag: last wins
  EXPECT_FALSE(g.bf16);
  EXPECT_EQ(g.lr, 2.0);
  EXPECT_FALSE(u.is_set("--seed"));
  EXPECT_EQ(g.log, (Strings{"--bf16=false", "--lr=1", "--lr=2"}));
}

TEST(FlagTable, ListStopsAtFlagAndAtItsMaximum) {
  Fields f;
  FlagTable t = make_table(f, "FILE...");
  auto r = t.parse({"--rampup-batch-size", "1", "2", "3", "extra", "--data-path", "x", "--", "--lr", "y"});
  EXPECT_EQ(f.rampup, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f.data_path, Strings{"x"});
  EXPECT_EQ(r.positionals, (Strings{"extra", "--lr", "y"}));
  EXPECT_EQ(f.lr, 0.0);
}

TEST(FlagTable, AliasIsAnotherNameOfTheRow) {
  Fields f;
  FlagTable t = make_table(f);
  t.alias("--seed", "--random-seed");
  t.parse({"--random-seed", "7"});
  EXPECT_EQ(f.seed, 7);
  EXPECT_TRUE(t.is_set("--seed"));
}

TEST(FlagTable, ErrorsNameTheFlag) {
  EXPECT_EQ(parse_error({"--lr", "abc"}), "--lr: expected a number, got 'abc'");
  EXPECT_EQ(parse_error({"--lr="}), "--lr: expected a number, got ''");
  for (const char* v : {"1e-320", "1e400"})  // numbers, but not doubles (they used to read "expected a number")
    EXPECT_EQ(parse_error({"--lr", v}),
              str("--lr: ", v, " is outside the range of a double (magnitudes 1e-308 to 1e308, or 0)"));
  EXPECT_EQ(parse_error({"--seed", "1.5"}), "--seed: expected an integer, got '1.5'");
  EXPECT_EQ(parse_error({"--seed", "99999999999999999999"}),
            "--seed: expected an integer, got '99999999999999999999'");
  EXPECT_EQ(parse_error({"--bf16=yes"}), "--bf16: expected true or false, got 'yes'");
  EXPECT_EQ(parse_error({"--lr"}), "--lr: expected a value");
  EXPECT_EQ(parse_error({"--lr", "--seed", "3"}), "--lr: expected a value, got the flag --seed");
  EXPECT_EQ(parse_error({"--data-path"}), "--data-path: expected at least 1 values, got 0");
  EXPECT_EQ(parse_error({"--rampup-batch-size", "1", "2"}), "--rampup-batch-size: expected 3 values, got 2");
  EXPECT_EQ(parse_error({"--weights", "1", "x"}), "--weights: expected a number, got 'x'");
  EXPECT_EQ(parse_error({"--lr-decay-style", "wsd"}),
            "--lr-decay-style: expected one of constant, linear, cosine, got 'wsd'");
  EXPECT_EQ(parse_error({"--lr", "1", "stray"}), "unexpected argument 'stray' (flags start with --)");
  EXPECT_EQ(parse_error({"--config"}), "--config: expected a file name");
  EXPECT_EQ(parse_error({"--config=a.yaml", "--config", "b.yaml"}), "--config: given twice");
}

TEST(FlagTable, UnknownFlagsSuggestTheClosest) {
  EXPECT_EQ(parse_error({"--lr-decay-styel", "cosine"}),
            "unknown flag --lr-decay-styel; did you mean --lr-decay-style?");
  EXPECT_EQ(parse_error({"--num-layer", "2"}), "unknown flag --num-layer; did you mean --num-layers?");
  EXPECT_EQ(parse_error({"-lr", "2"}), "unknown flag -lr; did you mean --lr?");
  EXPECT_EQ(parse_error({"--persistent-save-intervals", "2"}),
            "unknown flag --persistent-save-intervals; did you mean --persistent-save-interval?");
  EXPECT_EQ(parse_error({"--tensorboard-dir", "x"}), "unknown flag --tensorboard-dir");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
}

TEST(FlagTable, ConfigEntriesThenFlags) {
  Fields f;
  FlagTable t = make_table(f);
  ConfigFile file = parse_config_text("lr: 1.0\nnum_layers: 4\nbf16: true\ndata_path: [a, b]\n",
                                      ConfigFormat::Yaml, "run.yaml");
  t.apply_config(file);
  EXPECT_EQ(f.log, (Strings{"--lr=1.0", "--num-layers=4", "--bf16=true", "--data-path=a,b"}));
  EXPECT_TRUE(t.is_set("--num-layers"));

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hytra_flags_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "run.toml").string();
  std::ofstream(path) << "lr = 1.0\nnum_layers = 4\nseed = 5\ndata-path = 'only'\n";
  Fields g;
  FlagTable u = make_table(g);
  auto r = u.parse({"--lr", "2.5", "--config", path, "--data-path", "x", "y"});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.config_path, path);
  EXPECT_EQ(g.lr, 2.5);  // the flag overrides the file, wherever --config stands
  EXPECT_EQ(g.num_layers, 4);
  EXPECT_EQ(g.seed, 5);
  EXPECT_EQ(g.data_path, (Strings{"x", "y"}));
  EXPECT_EQ(g.log, (Strings{"--lr=1.0", "--num-layers=4", "--seed=5", "--data-path=only", "--lr=2.5",
                            "--data-path=x,y"}));
}

std::string config_error(const std::string& text) {
  Fields f;
  FlagTable t = make_table(f);
  try {
    t.apply_config(parse_config_text(text, ConfigFormat::Yaml, "run.yaml"));
  } catch (const Error& e) {
    EXPECT_TRUE(f.log.empty()) << "a setter ran before the error";
    return e.what();
  }
  return "no error";
}

TEST(FlagTable, ConfigErrorsNameFileLineAndKey) {
  EXPECT_EQ(config_error("lr: 1\nnum_layer: 2\n"),
            "run.yaml:2: unknown key 'num-layer'; did you mean 'num-layers'?");
  EXPECT_EQ(config_error("frobnicate: 2\n"), "run.yaml:1: unknown key 'frobnicate'");
  EXPECT_EQ(config_error("lr: 1\nseed: abc\n"), "run.yaml:2: --seed: expected an integer, got 'abc'");
  EXPECT_EQ(config_error("lr: [1, 2]\n"), "run.yaml:1: --lr: expected a single value, got 2 values");
  EXPECT_EQ(config_error("bf16: 1\n"), "run.yaml:1: --bf16: expected true or false, got '1'");
  EXPECT_EQ(config_error("config: other.yaml\n"),
            "run.yaml:1: --config inside a config file is not supported");
  EXPECT_EQ(config_error("rampup_batch_size: [1, 2, 3, 4]\n"),
            "run.yaml:1: --rampup-batch-size: expected 3 values, got 4");
}

// TOML is typed: a quoted string is never a number or a bool (YAML quotes only delimit).
TEST(FlagTable, TomlStringsAreNotNumbers) {
  auto toml_error = [](const std::string& text) {
    Fields f;
    FlagTable t = make_table(f);
    try {
      t.apply_config(parse_config_text(text, ConfigFormat::Toml, "run.toml"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(toml_error("num_layers = \"4\"\n"),
            "run.toml:1: num-layers: expected an integer, got the string \"4\" (TOML strings are quoted: write the "
            "value without quotes)");
  EXPECT_NE(toml_error("lr = '0.1'\n").find("expected a number, got the string"), std::string::npos);
  EXPECT_NE(toml_error("bf16 = \"true\"\n").find("expected true or false"), std::string::npos);
  EXPECT_EQ(toml_error("num_layers = 4\nlr = 0.1\nbf16 = true\n"), "no error");
  EXPECT_EQ(config_error("num_layers: \"4\"\n"), "no error");  // YAML
}

TEST(FlagTable, SetterErrorsGetTheFlagName) {
  std::string style;
  FlagTable t;
  FlagSpec s;
  s.name = "--style";
  s.kind = Kind::String;
  s.set = [&style](const FlagValues& v) {
    HYTRA_CHECK(v[0] == "a", "expected a, got ", v[0]);
    style = v[0];
  };
  t.add(s);
  FlagSpec n;
  n.name = "--small";
  n.kind = Kind::Int;
  int small = 0;
  n.set = store(small).set;
  t.add(n);
  EXPECT_THROW(
      try {
        t.parse({"--style", "b"});
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "--style: expected a, got b");
        throw;
      },
      Error);
  EXPECT_THROW(
      try {
        t.parse({"--small", "3000000000"});
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "--small: expected an integer in [-2147483648, 2147483647], got 3000000000");
        throw;
      },
      Error);
  EXPECT_THROW(
      try {
        t.apply_config(parse_config_text("style = \"c\"\n", ConfigFormat::Toml, "x.toml"));
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "x.toml:1: --style: expected a, got c");
        throw;
      },
      Error);
  t.parse({"--style", "a"});
  EXPECT_EQ(style, "a");
}

TEST(FlagTable, HelpStopsParsingAndPrintsTheTable) {
  Fields f;
  FlagTable t = make_table(f);
  EXPECT_TRUE(t.parse({"--lr", "abc", "--help"}).help);
  EXPECT_TRUE(t.parse({"-h"}).help);
  EXPECT_TRUE(f.log.empty());

  FlagTable small("PATTERN");
  FlagSpec lr;
  lr.name = "--lr";
  lr.kind = Kind::Float;
  lr.default_text = "None";
  lr.help = "peak learning rate";
  lr.set = store(f.lr).set;
  small.add(lr);
  FlagSpec style;
  style.name = "--lr-decay-style";
  style.choices = {"constant", "linear"};
  style.default_text = "linear";
  style.help = "decay shape";
  style.set = store(f.decay_style).set;
  small.add(style);
  FlagSpec save;
  save.name = "--save-interval";
  save.aliases = {"--persistent-save-interval"};
  save.kind = Kind::Int;
  save.help = "iterations between saves";
  save.set = store(f.save_interval).set;
  small.add(save);
  FlagSpec bf16;
  bf16.name = "--bf16";
  bf16.kind = Kind::Bool;
  bf16.help = "bf16 mixed precision";
  bf16.set = store(f.bf16).set;
  small.add(bf16);
  EXPECT_EQ(
      small.help_text("hytra train"),
      "usage: hytra train [flags] PATTERN\n"
      "\n"
      "flags:\n"
      "  --help, -h                            print this table and exit\n"
      "  --config FILE                         read flags from a .yaml/.yml/.toml file; command-line flags "
      "override it\n"
      "  --lr FLOAT                            peak learning rate (default: None)\n"
      "  --lr-decay-style {constant,linear}    decay shape (default: linear)\n"
      "  --save-interval, --persistent-save-interval INT\n"
      "                                        iterations between saves\n"
      "  --bf16                                bf16 mixed precision\n");
  EXPECT_EQ(small.parse({"x"}).positionals, Strings{"x"});
}

}  // namespace
}  // namespace hytra
