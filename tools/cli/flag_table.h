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
  // What an unset value means, shown by --help as the default (e.g. "None" or "hidden/heads"): given only where
  // the default is decided at run time; otherwise --help shows value() before parsing (the field's initialiser).
  std::string default_text;
  // The bound field's value as the flag's values (what the command line would give), nullopt when unset (None).
  // --help shows it as the default; the resolved run configuration (FlagTable::resolved_yaml) writes it.
  std::function<std::optional<FlagValues>()> value;
  std::optional<FlagValues> initial;  // value() when the row was added (set by FlagTable::add)
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

// A row's setter, and the bound config field's value as flag values (FlagSpec::value).
struct Binding {
  std::function<void(const FlagValues&)> set;
  std::function<std::optional<FlagValues>()> value;
  Binding(std::function<void(const FlagValues&)> s, std::function<std::optional<FlagValues>()> v = {})
      : set(std::move(s)), value(std::move(v)) {}
  template <class F, class = std::enable_if_t<std::is_invocable_v<F&, const FlagValues&>>>
  Binding(F f) : set(std::move(f)) {}
};

// Setters for the common case: store the (already checked) value into a config field (and read it back). A string
// or list that is empty, or an optional without a value, reads back as unset.
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
  // The values the flag was last given (config file or command line), or nullptr.
  const FlagValues* given(const std::string& name) const;
  // The bound row's current value (FlagSpec::value; nullopt also for a row without one).
  std::optional<FlagValues> value_of(const std::string& name) const;
  // The resolved configuration: a flat YAML document that --config reads back, one `key: value` line per row with
  // a value, in table order, after the comment lines `header` (each line prefixed "# "). A row whose default is
  // decided at run time (it has a default_text) is written only when its value differs from its initial one, so
  // the derivation happens again on reading; rows without a value getter (the no-effect flags) are left out.
  std::string resolved_yaml(const std::string& header) const;
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
  std::map<std::string, FlagValues> given_;  // canonical names given so far -> their last values
  std::string positionals_help_;
};

}  // namespace hytra
