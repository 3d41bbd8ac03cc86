// Generic command-line flags: a table of FlagSpec rows that parses argv and `--config FILE`
// (docs/ARCHITECTURE.md "Configuration flow"; flag names and defaults in docs/spec/megatron_cli.md §6).
//
// Command line: `--flag value`, `--flag=value`; bool flags take no value (`--flag`, or `--flag=true|false`);
// list flags take every following token up to the next `--flag` (or `--flag=v` for one element);
// `--` ends the flags; `--help` / `-h` asks for the help table; `--config FILE` reads a YAML/TOML file
// (config_file.h). Underscores in flag names are read as dashes. Order of application: the config
// file's entries first (file order), then the command-line flags (argv order), so flags override the
// file and a repeated flag keeps its last value. Everything is checked before the first setter runs:
// unknown flags and keys (with the closest known name suggested), missing values, type errors
// ("--lr: expected a number, got 'abc'"), choices, list lengths, positional arguments.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "cli/config_file.h"

namespace hytra {

using FlagValues = std::vector<std::string>;

struct FlagSpec {
  enum class Kind { Int, Float, String, Bool, IntList, FloatList, StringList };
  std::string name;  // "--lr"
  Kind kind = Kind::String;
  // Shown by --help as the default: default_text when given (what a value means, e.g. "None" or
  // "hidden/heads"), else show(), the bound config field's value before parsing (its initialiser).
  std::string default_text;
  std::function<std::string()> show;
  std::string help;
  // Receives the checked values: one element for scalars ("true"/"false" for Bool), one or more for
  // lists. It may throw hytra::Error for a value the type check cannot judge.
  std::function<void(const FlagValues&)> set;
  std::vector<std::string> aliases;  // other accepted names, e.g. "--persistent-save-interval"
  std::vector<std::string> choices;  // String / StringList: allowed values (empty = any)
  int min_values = 1;                // list kinds: element count bounds (max -1 = unbounded)
  int max_values = -1;
};

// Value checks shared by the table and the setters below; errors name the flag.
int64_t parse_int_value(const std::string& flag, const std::string& text);
double parse_float_value(const std::string& flag, const std::string& text);
bool parse_bool_value(const std::string& flag, const std::string& text);

// A row's setter, and for rows bound to one config field, that field's value as text.
struct Binding {
  std::function<void(const FlagValues&)> set;
  std::function<std::string()> show;
  Binding(std::function<void(const FlagValues&)> s, std::function<std::string()> sh = {})
      : set(std::move(s)), show(std::move(sh)) {}
  template <class F, class = std::enable_if_t<std::is_invocable_v<F&, const FlagValues&>>>
  Binding(F f) : set(std::move(f)) {}
};

// Setters for the common case: store the (already checked) value into a config field (and show it).
Binding store(int64_t& field);
Binding store(int& field);
Binding store(double& field);
Binding store(bool& field);
Binding store(std::string& field);
Binding store(std::optional<int64_t>& field);
Binding store(std::optional<double>& field);
Binding store(std::optional<std::string>& field);
Binding store(std::vector<int64_t>& field);
Binding store(std::vector<double>& field);
Binding store(std::vector<std::string>& field);

// Levenshtein distance (insert, delete, substitute; cost 1 each).
size_t edit_distance(const std::string& a, const std::string& b);

class FlagTable {
 public:
  struct Result {
    bool help = false;                     // --help / -h seen: nothing was applied
    std::vector<std::string> positionals;  // only when the table allows them
    std::string config_path;               // the --config file, if any
  };

  // `positionals_help`: non-empty allows positional arguments and names them in the usage line.
  explicit FlagTable(std::string positionals_help = "");

  // Adds a row; a name or alias used twice is an internal error.
  void add(FlagSpec spec);
  // The common row: a name, a kind, the default shown by --help, the help text and the setter.
  void add(std::string name, FlagSpec::Kind kind, std::string default_text, std::string help, Binding set,
           std::vector<std::string> choices = {});
  // Another accepted name for the row `name` (already added): a seed or deprecated spelling.
  void alias(const std::string& name, const std::string& other);

  // Parses `args` (argv without the program / subcommand names) and applies them as described above.
  Result parse(const std::vector<std::string>& args);
  // Applies one config file's entries (what parse() does for --config).
  void apply_config(const ConfigFile& file);

  // Whether the flag (by name or alias) was given in a config file or on the command line.
  bool is_set(const std::string& name) const;
  // "--lr-decay: unknown flag; did you mean --lr-decay-style?" style suggestion, or "" if none is close.
  std::string suggest(const std::string& name) const;
  const std::vector<FlagSpec>& rows() const { return specs_; }
  // The --help table: usage line, then one row per flag with its value kind, help and default.
  std::string help_text(const std::string& usage) const;

 private:
  const FlagSpec* find(const std::string& name) const;
  void check(const FlagSpec& spec, const FlagValues& values) const;
  void apply(const FlagSpec& spec, const FlagValues& values);

  std::vector<FlagSpec> specs_;
  std::map<std::string, size_t> index_;  // name or alias -> row
  std::set<std::string> set_;            // canonical names given so far
  std::string positionals_help_;
};

}  // namespace hytra
