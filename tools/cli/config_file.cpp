// Flat YAML / TOML config reader (config_file.h): yaml-cpp and toml++ parse, this file checks that
// the document is a flat list of flags and turns each value into text for the flag table.
#include "cli/config_file.h"

#include <toml++/toml.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace hytra {
namespace {

[[noreturn]] void fail_at(const std::string& path, int line, const std::string& msg) {
  fail(str(path, ":", line, ": ", msg));
}

// A parser's syntax error: its message, and the offending line where there is one.
[[noreturn]] void syntax_error(const std::string& path, const std::string& text, int line, std::string_view msg) {
  std::istringstream in(text);
  std::string source;
  for (int i = 0; i < line && std::getline(in, source);) ++i;
  const size_t b = source.find_first_not_of(" \t\r"), e = source.find_last_not_of(" \t\r");
  source = b == std::string::npos ? "" : source.substr(b, e - b + 1);
  fail_at(path, line, str(msg, source.empty() ? "" : str(" in '", source, "'")));
}

std::string flag_key(const std::string& path, int line, const std::string& raw) {
  const bool ok = !raw.empty() && std::all_of(raw.begin(), raw.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  if (!ok) fail_at(path, line, str("expected a key of letters, digits, '-' or '_', got '", raw, "'"));
  return normalize_config_key(raw);
}

// ---- YAML --------------------------------------------------------------------------------------------

const char* yaml_kind(const YAML::Node& n) {
  if (n.IsMap()) return "a nested mapping (the file must be flat 'key: value' lines)";
  if (n.IsSequence()) return "a nested list (lists hold scalars)";
  return "nothing";
}

// yaml-cpp 0.7 ends a quoted scalar that never closes at the end of the file instead of failing, which
// would take every later line into the value; refuse it as the YAML specification does.
void check_closed(const std::string& path, const std::string& text, const YAML::Node& n) {
  const size_t open = size_t(n.Mark().pos);
  if (n.Tag() != "!" || open >= text.size() || (text[open] != '"' && text[open] != '\'')) return;
  const char q = text[open];
  for (size_t i = open + 1; i < text.size(); ++i) {
    if (q == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {  // '' is a quote inside '...'
        ++i;
        continue;
      }
      return;
    }
  }
  fail_at(path, n.Mark().line + 1, str("unterminated string: expected a closing ", q));
}

// yaml-cpp 0.7 never returns (it allocates without end) when a ',' outside [...] or {...} follows nothing or a
// complete node: at a document's start, after 'x' or "x", after [..] or {..}, at the start of a line after a value
// (found by tests/fuzz). Refuse that before it parses: a line starting with ',' (never needed in a flat file), and a
// ',' outside [...] right after nothing, a quoted scalar or a flow collection. Quoted scalars are taken to end on
// their line (hytra's values are one line), so a line's leading ',' is never hidden inside one. The scan tracks quotes
// (opened only where a token starts, so the apostrophe of a plain it's stays a letter), flow depth, comments and the
// document markers '---' / '...'.
void check_no_stray_flow_entry(const std::string& path, const std::string& text) {
  bool pending = true;  // nothing since the document start, a closed quote or a closed flow collection
  bool token_start = true;
  bool first_on_line = true;  // no character but blanks yet on this line
  int depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool line_start = i == 0 || text[i - 1] == '\n';
    if (c == '\n') {
      ++line;
      token_start = true;
      first_on_line = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      token_start = true;
      continue;
    }
    if (line_start && depth == 0 && (text.compare(i, 3, "---") == 0 || text.compare(i, 3, "...") == 0)) {
      pending = true;
      i += 2;
      continue;
    }
    if (c == '#' && token_start) {  // a comment to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if ((c == '\'' || c == '"') && token_start) {  // a quoted scalar
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '\n'; ++j) {
        if (c == '"' && text[j] == '\\' && j + 1 < text.size() && text[j + 1] != '\n') {
          ++j;
        } else if (text[j] == c) {
          if (c == '\'' && j + 1 < text.size() && text[j + 1] == '\'') {
            ++j;
            continue;
          }
          break;
        }
      }
      if (j < text.size() && text[j] == c) {  // (one not closed on its line is scanned on as plain text)
        i = j;
        pending = depth == 0;
        token_start = false;
        first_on_line = false;
        continue;
      }
    }
    // (hytra's flat files never start a line with ',', which also keeps the scan free of plain-scalar rules)
    if (c == ',' && first_on_line) fail_at(path, line, "a line cannot start with ','");
    first_on_line = false;
    if (c == ',' && depth == 0 && pending) fail_at(path, line, "',' outside [...]: expected a key or a value");
    if ((c == '[' || c == '{') && (token_start || depth > 0)) ++depth;  // (inside a plain scalar: a letter)
    if ((c == ']' || c == '}') && depth > 0) {
      --depth;
      pending = depth == 0;
      token_start = true;
      continue;
    }
    pending = false;
    token_start = c == ':' || c == ',' || c == '[' || c == '{' || c == '-' || c == '?';
  }
}

// One scalar value; `line` is the key's (yaml-cpp marks an empty value at the next token).
std::string yaml_scalar(const std::string& path, const std::string& text, const std::string& key, int line,
                        const YAML::Node& n, bool item) {
  if (!n.IsScalar())
    fail_at(path, n.IsNull() ? line : n.Mark().line + 1,
            str(key, ": expected ", item ? "a list element" : "a value, a [list] or '- item' lines", ", got ",
                yaml_kind(n)));
  check_closed(path, text, n);
  return n.Scalar();
}

std::vector<ConfigEntry> parse_yaml(const std::string& text, const std::string& path) {
  std::vector<YAML::Node> docs;
  check_no_stray_flow_entry(path, text);
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    syntax_error(path, text, e.mark.line + 1, e.msg);
  }
  if (docs.size() > 1) fail_at(path, docs[1].Mark().line + 1, "expected one document, got a second one ('---')");
  if (docs.empty() || docs[0].IsNull()) return {};
  const YAML::Node& root = docs[0];
  if (!root.IsMap())
    fail_at(path, root.Mark().line + 1,
            str("expected 'key: value' lines, got ", root.IsScalar() ? "'" + root.Scalar() + "'" : "a list"));
  std::vector<ConfigEntry> entries;
  for (const auto& kv : root) {
    const int line = kv.first.Mark().line + 1;
    if (!kv.first.IsScalar()) fail_at(path, line, str("expected a key, got ", yaml_kind(kv.first)));
    ConfigEntry e{flag_key(path, line, kv.first.Scalar()), {}, line, {}};
    if (kv.second.IsSequence()) {
      for (const YAML::Node& item : kv.second) e.values.push_back(yaml_scalar(path, text, e.key, line, item, true));
    } else {
      e.values.push_back(yaml_scalar(path, text, e.key, line, kv.second, false));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// ---- TOML --------------------------------------------------------------------------------------------

// The shortest %g-style text that reads back as the same double; a whole number keeps its ".0", so an integer
// flag still refuses `4.0` as it would on the command line.
std::string float_text(double x) {
  char buf[32];
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, x, std::chars_format::general).ptr);
  if (s.find_first_not_of("-0123456789") == std::string::npos) s += ".0";
  return s;
}

std::string toml_scalar(const std::string& path, const std::string& key, const toml::node& n, bool item) {
  if (const auto* s = n.as_string()) return s->get();
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* f = n.as_floating_point()) return float_text(f->get());
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  const char* got = n.is_table()   ? "a table (nested tables are not supported: use flat 'key = value' lines)"
                    : n.is_array() ? "a nested array (arrays hold scalars)"
                                   : "a date or time";
  fail_at(path, int(n.source().begin.line),
          str(key, ": expected ", item ? "an array element" : "a value", " (a string, number, true/false",
              item ? ")" : " or [array])", ", got ", got));
}

// toml++ 3 aborts on a failed internal check (or, built with NDEBUG, goes on undefined) for some malformed table
// headers (found by tests/fuzz: "[=" then a NUL byte). A table header (a line starting with '[' outside an array)
// whose name does not start with a key character or a quote is refused before toml++ sees the text; well-formed
// ones reach the flat-file check below, which names the table.
void check_no_table_header(const std::string& path, const std::string& text) {
  int depth = 0, line = 1;
  bool line_start = true;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '[' && line_start && depth == 0) {
      size_t k = i + 1;
      if (k < text.size() && text[k] == '[') ++k;  // [[array of tables]]
      while (k < text.size() && (text[k] == ' ' || text[k] == '\t')) ++k;
      const unsigned char n = k < text.size() ? static_cast<unsigned char>(text[k]) : 0;
      if (!(std::isalnum(n) || n == '_' || n == '-' || n == '"' || n == '\''))
        fail_at(path, line, "a malformed table header (expected a key after '[')");
    }
    line_start = false;
    if (c == '#') {  // a comment to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {  // a string on one line (one that does not close there: toml++ refuses it)
      size_t j = i + 1;
      while (j < text.size() && text[j] != '\n' && text[j] != c) j += (c == '"' && text[j] == '\\') ? 2 : 1;
      if (j < text.size() && text[j] == c) i = j;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']' && depth > 0) {
      --depth;
    }
  }
}

std::vector<ConfigEntry> parse_toml(const std::string& text, const std::string& path) {
  check_no_table_header(path, text);
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error& e) {
    std::string msg(e.description());
    // toml++'s words for an unquoted string, the usual slip when a YAML recipe becomes TOML.
    if (msg.find("could not determine value type") != std::string::npos) msg += " (TOML strings are quoted)";
    syntax_error(path, text, int(e.source().begin.line), msg);
  }
  std::vector<ConfigEntry> entries;
  for (const auto& [k, v] : root) {
    const int line = int(k.source().begin.line);
    ConfigEntry e{flag_key(path, line, std::string(k.str())), {}, line, {}};
    auto add = [&](const toml::node& n, bool item) {
      e.values.push_back(toml_scalar(path, e.key, n, item));
      e.quoted.push_back(n.is_string());
    };
    if (const toml::array* a = v.as_array()) {
      for (const toml::node& item : *a) add(item, true);
    } else {
      add(v, false);
    }
    entries.push_back(std::move(e));
  }
  // A toml::table is ordered by key; the flag table wants file order (its errors come in that order).
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.line < b.line; });
  return entries;
}

}  // namespace

std::string normalize_config_key(const std::string& key) {
  std::string out = key.substr(std::min(key.find_first_not_of('-'), key.size()));
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

ConfigFile parse_config_text(const std::string& text, ConfigFormat format, const std::string& name) {
  ConfigFile file{name, format == ConfigFormat::Yaml ? parse_yaml(text, name) : parse_toml(text, name)};
  // Duplicates are checked after normalisation (`num_layers` and `num-layers` are one flag), and
  // yaml-cpp keeps both copies of a repeated key.
  std::map<std::string, int> seen;
  for (const ConfigEntry& e : file.entries) {
    const auto [it, inserted] = seen.emplace(e.key, e.line);
    if (!inserted) fail_at(name, e.line, str("duplicate key '", e.key, "' (first set at line ", it->second, ")"));
  }
  return file;
}

ConfigFile read_config_file(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  ConfigFormat format;
  if (ext == ".yaml" || ext == ".yml")
    format = ConfigFormat::Yaml;
  else if (ext == ".toml")
    format = ConfigFormat::Toml;
  else
    fail(str("--config ", path, ": unknown format: expected a .yaml, .yml or .toml file"));
  std::ifstream in(path, std::ios::binary);
  HYTRA_CHECK(in, "--config ", path, ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config_text(text.str(), format, path);
}

}  // namespace hytra
