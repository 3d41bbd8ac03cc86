// `--config FILE`: a flat YAML or TOML file holding flag values (docs/ARCHITECTURE.md "Configuration flow").
//
// Accepted (format chosen by extension: .yaml/.yml or .toml):
//   YAML  `key: value`, `key: [a, b]`, or `key:` followed by block `- item` lines; `#` comments;
//         "double" (\" \\ \n \t escapes) and 'single' ('' escape) quoted strings; `---` ignored.
//   TOML  `key = value` with "basic" / 'literal' strings, numbers (underscores dropped), true/false,
//         and arrays `[1, 2]` (which may span lines); `#` comments.
// Keys are normalised to the flag spelling: underscores become dashes (`num_layers` == `num-layers`),
// and a leading `--` is dropped.
// Every value is kept as text (quotes removed), a scalar as a one-element list; the flag table
// type-checks it. TOML is typed, so a quoted TOML string where a number or bool is expected is an
// error (YAML files quote numbers freely, so there quotes only delimit). Errors read "FILE:LINE: what was expected, got what"; nested mappings, tables,
// inline tables, nested lists, multi-line strings and duplicate keys are errors.
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
