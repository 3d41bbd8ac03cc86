// `--config FILE`: a flat YAML or TOML file holding flag values (docs/ARCHITECTURE.md "Configuration flow"),
// parsed by yaml-cpp and toml++; the format comes from the extension (.yaml/.yml or .toml).
//
// The document is one mapping (YAML `key: value`, TOML `key = value`) whose values are scalars or
// lists of scalars (YAML `[a, b]` or `- item` lines, TOML arrays). Keys are normalised to the flag
// spelling: underscores become dashes (`num_layers` == `num-layers`), and a leading `--` is dropped.
// Every value is kept as text, a scalar as a one-element list; the flag table type-checks it. YAML
// scalars are the text as written (quotes removed: YAML files quote numbers freely). TOML is typed:
// strings are kept as they are and marked `quoted` (so a quoted string where a number or bool is
// expected is an error), integers are written in decimal, floats as the shortest text that reads back
// as the same double (`3e-4` -> "0.0003", `4.0` stays "4.0").
// Errors read "FILE:LINE: ..."; a syntax error carries the parser's message and the offending line.
// Nested mappings and tables (`[table]`, dotted keys, inline tables), nested lists, empty values,
// several YAML documents, TOML dates and duplicate keys are errors.
#pragma once
#include <string>
#include <vector>

namespace hytra {

enum class ConfigFormat { Yaml, Toml };

struct ConfigEntry {
  std::string key;                  // normalised: "num-layers" (no leading dashes)
  std::vector<std::string> values;  // scalars: one element; lists: the elements (maybe none)
  int line = 0;                     // 1-based line of the key, for error messages
  std::vector<bool> quoted;         // per value: a TOML quoted string (typed: never a number or bool)
};

struct ConfigFile {
  std::string path;                  // as given, used in error messages
  std::vector<ConfigEntry> entries;  // in file order
};

// Reads and parses `path`; the format comes from the extension (an unknown one is an error naming the file).
ConfigFile read_config_file(const std::string& path);
// Parses `text` as if read from a file named `name`.
ConfigFile parse_config_text(const std::string& text, ConfigFormat format, const std::string& name);
// "num_layers" -> "num-layers"; leading dashes are dropped ("--lr" -> "lr").
std::string normalize_config_key(const std::string& key);

}  // namespace hytra
