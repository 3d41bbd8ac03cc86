// Flat YAML / TOML config reader (config_file.h): a line-based parser for the subset a flag file needs.
#include "cli/config_file.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace hytra {
namespace {

bool is_blank(const std::string& s) { return s.find_first_not_of(" \t\r") == std::string::npos; }

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A quote opens a string only where a value starts (YAML plain scalars may contain apostrophes).
bool opens_value(const std::string& s, size_t i) {
  while (i > 0 && (s[i - 1] == ' ' || s[i - 1] == '\t')) --i;
  return i == 0 || std::string(":[,-=").find(s[i - 1]) != std::string::npos;
}

// Index of the first of `targets` in s outside quoted strings at bracket depth <= max_depth, or npos.
size_t find_outside_quotes(const std::string& s, size_t from, const std::string& targets, int max_depth) {
  char quote = 0;
  int depth = 0;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (quote == '"') {
      if (c == '\\')
        ++i;
      else if (c == '"')
        quote = 0;
    } else if (quote == '\'') {
      if (c == '\'') quote = 0;
    } else if ((c == '"' || c == '\'') && opens_value(s, i)) {
      quote = c;
    } else if (depth <= max_depth && targets.find(c) != std::string::npos) {
      return i;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']') {
      --depth;
    }
  }
  return std::string::npos;
}

class Parser {
 public:
  Parser(const std::string& text, ConfigFormat format, const std::string& name)
      : format_(format), name_(name) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines_.push_back(strip_comment(line));
    out_.path = name;
  }

  ConfigFile run() {
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (is_blank(lines_[i])) continue;
      i = format_ == ConfigFormat::Yaml ? yaml_entry(i) : toml_entry(i);
    }
    return out_;
  }

 private:
  [[noreturn]] void error(size_t index, const std::string& msg) const {
    fail(str(name_, ":", index + 1, ": ", msg));
  }

  // The line up to its comment: '#' outside quotes (in YAML only at the start or after whitespace).
  std::string strip_comment(const std::string& line) const {
    for (size_t i = 0; (i = find_outside_quotes(line, i, "#", INT_MAX)) != std::string::npos; ++i)
      if (format_ == ConfigFormat::Toml || i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t') return line.substr(0, i);
    return line;
  }

  std::string checked_key(size_t index, const std::string& raw) const {
    if (raw.empty()) error(index, "expected a key before the separator");
    if (format_ == ConfigFormat::Toml && raw.find('.') != std::string::npos)
      error(index, str("dotted key '", raw,
                       "' is a nested table: nested tables are not supported "
                       "(use flat 'key = value' lines)"));
    for (char c : raw)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
        error(index, str("expected a key of letters, digits, '-' or '_', got '", raw, "'"));
    return normalize_config_key(raw);
  }

  void add(size_t index, const std::string& key, std::vector<std::string> values) {
    auto [it, inserted] = seen_.emplace(key, int(index + 1));
    if (!inserted) error(index, str("duplicate key '", key, "' (first set at line ", it->second, ")"));
    out_.entries.push_back({key, std::move(values), int(index + 1), {}});
  }

  // One scalar value (not a list): quotes removed and escapes decoded.
  std::string scalar(size_t index, const std::string& text, bool in_list) const {
    const std::string s = trim(text);
    if (s.empty()) error(index, in_list ? "expected a list element" : "expected a value");
    if (s[0] == '"' || s[0] == '\'') return quoted(index, s);
    if (s[0] == '[') error(index, str("nested list ", s, " not supported (lists hold scalars)"));
    if (s[0] == '{')
      error(index, str(format_ == ConfigFormat::Yaml ? "nested mapping " : "inline table (nested table) ", s,
                       " not supported (the file must be flat)"));
    if (format_ == ConfigFormat::Toml) return toml_bare(index, s);
    if (!in_list && (s[0] == '|' || s[0] == '>'))
      error(index, "block scalars ('|', '>') not supported: write the value on one line");
    if (s.find(": ") != std::string::npos || s.back() == ':')
      error(index, str("nested mapping '", s, "' not supported (the file must be flat 'key: value' lines)"));
    return s;
  }

  std::string quoted(size_t index, const std::string& s) const {
    const char q = s[0];
    if (format_ == ConfigFormat::Toml && (starts_with(s, "\"\"\"") || starts_with(s, "'''")))
      error(index, "multi-line strings not supported");
    std::string value;
    size_t i = 1;
    for (;; ++i) {
      if (i >= s.size()) error(index, str("unterminated string ", s));
      const char c = s[i];
      if (q == '\'' && c == '\'') {
        if (format_ == ConfigFormat::Yaml && i + 1 < s.size() && s[i + 1] == '\'') {
          value += '\'';
          ++i;
          continue;
        }
        break;
      }
      if (q == '"' && c == '"') break;
      if (q == '"' && c == '\\') {
        if (++i >= s.size()) error(index, str("unterminated string ", s));
        switch (s[i]) {
          case '"':
            value += '"';
            break;
          case '\\':
            value += '\\';
            break;
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          default:
            error(index, str("unsupported escape '\\", s[i], "' in ", s));
        }
        continue;
      }
      value += c;
    }
    if (!trim(s.substr(i + 1)).empty())
      error(index, str("expected nothing after the closing quote, got '", trim(s.substr(i + 1)), "'"));
    return value;
  }

  std::string toml_bare(size_t index, const std::string& s) const {
    if (s == "true" || s == "false") return s;
    bool digit = false, ok = true;
    std::string number;
    for (char c : s) {
      if (std::isdigit(static_cast<unsigned char>(c)))
        digit = true;
      else if (std::string("+-._eExobabcdefABCDEF").find(c) == std::string::npos)
        ok = false;
      if (c != '_') number += c;
    }
    const std::string unsigned_s = (s[0] == '+' || s[0] == '-') ? s.substr(1) : s;
    const bool leads = !unsigned_s.empty() &&
                       (std::isdigit(static_cast<unsigned char>(unsigned_s[0])) || unsigned_s[0] == '.');
    if ((ok && digit && leads) || unsigned_s == "inf" || unsigned_s == "nan") return number;
    error(index, str("expected a quoted string, number, true/false or [array], got '", s, "'"));
  }

  // `[a, b, ...]` starting at lines_[index] (possibly over several lines); returns the elements and
  // sets *last to the index of the line holding the closing bracket.
  std::vector<std::string> flow_list(size_t index, std::string text, size_t* last,
                                     std::vector<bool>* quoted_items = nullptr) const {
    size_t end = index;
    size_t close = find_outside_quotes(text, 1, "]", 0);
    while (close == std::string::npos) {
      if (++end >= lines_.size()) error(index, "unterminated list: expected ']'");
      text += " " + lines_[end];
      close = find_outside_quotes(text, 1, "]", 0);
    }
    if (!trim(text.substr(close + 1)).empty())
      error(end, str("expected nothing after ']', got '", trim(text.substr(close + 1)), "'"));
    std::vector<std::string> items;
    const std::string body = text.substr(1, close - 1);
    size_t start = 0;
    while (!is_blank(body.substr(start))) {
      size_t comma = find_outside_quotes(body, start, ",", 0);
      if (comma == std::string::npos) comma = body.size();
      const std::string item = trim(body.substr(start, comma - start));
      if (quoted_items) quoted_items->push_back(!item.empty() && (item[0] == '"' || item[0] == '\''));
      items.push_back(scalar(index, item, true));
      if (comma == body.size()) break;
      start = comma + 1;
    }
    *last = end;
    return items;
  }

  size_t yaml_entry(size_t i) {
    const std::string& s = lines_[i];
    if (trim(s) == "---") return i;
    if (s[0] == '\t') error(i, "tabs are not allowed for indentation");
    if (s[0] == ' ')
      error(i, str("unexpected indentation: expected 'key: value' at column 1, got '", trim(s), "'"));
    if (s[0] == '-' && (s.size() == 1 || s[1] == ' '))
      error(i, str("expected 'key: value', got a list item without a key: '", trim(s), "'"));
    size_t colon = s.find(':');
    while (colon != std::string::npos && colon + 1 < s.size() && s[colon + 1] != ' ' && s[colon + 1] != '\t')
      colon = s.find(':', colon + 1);
    if (colon == std::string::npos) error(i, str("expected 'key: value', got '", trim(s), "'"));
    const std::string key = checked_key(i, trim(s.substr(0, colon)));
    const std::string rest = trim(s.substr(colon + 1));
    if (!rest.empty() && rest[0] == '[') {
      size_t last = i;
      add(i, key, flow_list(i, rest, &last));
      return last;
    }
    if (!rest.empty()) {
      add(i, key, {scalar(i, rest, false)});
      return i;
    }
    std::vector<std::string> items;
    size_t j = i + 1, last = i;
    for (; j < lines_.size(); ++j) {
      const std::string& t = lines_[j];
      if (is_blank(t)) continue;
      const std::string item = trim(t);
      if (item[0] != '-' || (item.size() > 1 && item[1] != ' ')) {
        if (t[0] == ' ' || t[0] == '\t')
          error(j, str("nested mapping under '", key,
                       "' not supported (the file must be flat 'key: value' lines)"));
        break;
      }
      items.push_back(scalar(j, item.substr(1), true));
      last = j;
    }
    if (items.empty()) error(i, str("expected a value or '- item' lines after '", key, ":'"));
    add(i, key, std::move(items));
    return last;
  }

  size_t toml_entry(size_t i) {
    const std::string s = trim(lines_[i]);
    if (s[0] == '[')
      error(i, str("table ", s, ": nested tables are not supported (use flat 'key = value' lines)"));
    const size_t eq = find_outside_quotes(s, 0, "=", 0);
    if (eq == std::string::npos) error(i, str("expected 'key = value', got '", s, "'"));
    std::string raw_key = trim(s.substr(0, eq));
    if (!raw_key.empty() && (raw_key[0] == '"' || raw_key[0] == '\'')) raw_key = quoted(i, raw_key);
    const std::string key = checked_key(i, raw_key);
    const std::string rest = trim(s.substr(eq + 1));
    if (rest.empty()) error(i, str("expected a value after '", key, " ='"));
    if (rest[0] == '[') {
      size_t last = i;
      std::vector<bool> quoted_items;
      add(i, key, flow_list(i, rest, &last, &quoted_items));
      out_.entries.back().quoted = std::move(quoted_items);
      return last;
    }
    add(i, key, {scalar(i, rest, false)});
    out_.entries.back().quoted = {rest[0] == '"' || rest[0] == '\''};
    return i;
  }

  ConfigFormat format_;
  std::string name_;
  std::vector<std::string> lines_;  // comments stripped
  std::map<std::string, int> seen_;
  ConfigFile out_;
};

}  // namespace

std::string normalize_config_key(const std::string& key) {
  std::string out = key.substr(std::min(key.find_first_not_of('-'), key.size()));
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

ConfigFile parse_config_text(const std::string& text, ConfigFormat format, const std::string& name) {
  return Parser(text, format, name).run();
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
