// FlagTable: argv + config-file parsing over a table of FlagSpec rows (flag_table.h).
#include "cli/flag_table.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace hytra {
namespace {

using Kind = FlagSpec::Kind;

bool is_list(Kind k) { return k == Kind::IntList || k == Kind::FloatList || k == Kind::StringList; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Flag names compare with underscores read as dashes: "--num_layers" == "--num-layers".
std::string canonical(const std::string& name) {
  std::string out = name;
  for (size_t i = 2; i < out.size(); ++i)
    if (out[i] == '_') out[i] = '-';
  return out;
}

// A token that starts a flag, as opposed to a value such as "-1" or "-.5".
bool looks_like_flag(const std::string& t) {
  if (t.size() < 2 || t[0] != '-') return false;
  return !(std::isdigit(static_cast<unsigned char>(t[1])) || t[1] == '.');
}

std::string metavar(const FlagSpec& s) {
  if (!s.choices.empty()) return "{" + join(s.choices, ",") + "}" + (is_list(s.kind) ? "..." : "");
  switch (s.kind) {
    case Kind::Int:
      return "INT";
    case Kind::Float:
      return "FLOAT";
    case Kind::String:
      return "STR";
    case Kind::Bool:
      return "";
    case Kind::IntList:
      return "INT...";
    case Kind::FloatList:
      return "FLOAT...";
    case Kind::StringList:
      return "STR...";
  }
  return "";
}

}  // namespace

int64_t parse_int_value(const std::string& flag, const std::string& text) {
  const char* b = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const char* e = text.data() + text.size();
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(b, e, v);
  HYTRA_CHECK(b != e && ec == std::errc() && ptr == e, flag, ": expected an integer, got '", text, "'");
  return v;
}

double parse_float_value(const std::string& flag, const std::string& text) {
  const bool blank = text.empty() || std::isspace(static_cast<unsigned char>(text[0]));
  char* end = nullptr;
  errno = 0;
  const double v = blank ? 0.0 : std::strtod(text.c_str(), &end);
  HYTRA_CHECK(!blank && end == text.c_str() + text.size(), flag, ": expected a number, got '", text, "'");
  HYTRA_CHECK(errno != ERANGE, flag, ": ", text,
              " is outside the range of a double (magnitudes 1e-308 to 1e308, or 0)");
  return v;
}

bool parse_bool_value(const std::string& flag, const std::string& text) {
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  fail(str(flag, ": expected true or false, got '", text, "'"));
}

namespace {
using Value = std::optional<FlagValues>;
Value values_of(int64_t v) { return FlagValues{std::to_string(v)}; }
Value values_of(double v) { return FlagValues{exact_number_text(v)}; }
Value values_of(bool v) { return FlagValues{v ? "true" : "false"}; }
Value values_of(const std::string& v) { return v.empty() ? Value() : FlagValues{v}; }
template <class T>
Value values_of(const std::optional<T>& v) {
  return v ? values_of(*v) : Value();
}
std::string text_of(int64_t v) { return std::to_string(v); }
std::string text_of(double v) { return exact_number_text(v); }
const std::string& text_of(const std::string& v) { return v; }  // (a list's empty element stays an element)
template <class T>
Value values_of(const std::vector<T>& v) {
  FlagValues out;
  for (const T& x : v) out.push_back(text_of(x));
  return out.empty() ? Value() : out;
}
template <class T>
std::function<Value()> reader(const T& f) {
  return [&f] { return values_of(f); };
}
}  // namespace

Binding store(int64_t& f) {
  return {[&f](const FlagValues& v) { f = parse_int_value("", v.at(0)); }, reader(f)};
}
Binding store(int& f) {
  return {[&f](const FlagValues& v) {
            const int64_t x = parse_int_value("", v.at(0));
            HYTRA_CHECK(x >= INT_MIN && x <= INT_MAX, "expected an integer in [", INT_MIN, ", ", INT_MAX, "], got ",
                        x);
            f = int(x);
          },
          [&f] { return values_of(int64_t(f)); }};
}
Binding store(double& f) {
  return {[&f](const FlagValues& v) { f = parse_float_value("", v.at(0)); }, reader(f)};
}
Binding store(bool& f) {
  return {[&f](const FlagValues& v) { f = parse_bool_value("", v.at(0)); }, reader(f)};
}
Binding store(std::string& f) {
  return {[&f](const FlagValues& v) { f = v.at(0); }, reader(f)};
}
Binding store(std::optional<int64_t>& f) {
  return {[&f](const FlagValues& v) { f = parse_int_value("", v.at(0)); }, reader(f)};
}
Binding store(std::optional<double>& f) {
  return {[&f](const FlagValues& v) { f = parse_float_value("", v.at(0)); }, reader(f)};
}
Binding store(std::optional<std::string>& f) {
  return {[&f](const FlagValues& v) { f = v.at(0); }, reader(f)};
}
Binding store(std::vector<int64_t>& f) {
  return {[&f](const FlagValues& v) {
            f.clear();
            for (const auto& s : v) f.push_back(parse_int_value("", s));
          },
          reader(f)};
}
Binding store(std::vector<double>& f) {
  return {[&f](const FlagValues& v) {
            f.clear();
            for (const auto& s : v) f.push_back(parse_float_value("", s));
          },
          reader(f)};
}
Binding store(std::vector<std::string>& f) {
  return {[&f](const FlagValues& v) { f = v; }, reader(f)};
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

FlagTable::FlagTable(std::string positionals_help) : positionals_help_(std::move(positionals_help)) {}

void FlagTable::add(std::string name, FlagSpec::Kind kind, std::string default_text, std::string help, Binding set,
                    std::vector<std::string> choices) {
  FlagSpec s;
  s.name = std::move(name);
  s.kind = kind;
  s.default_text = std::move(default_text);
  s.help = std::move(help);
  s.set = std::move(set.set);
  s.value = std::move(set.value);
  s.choices = std::move(choices);
  add(std::move(s));
}

void FlagTable::add(FlagSpec spec) {
  HYTRA_ASSERT(spec.name.rfind("--", 0) == 0, "flag name must start with --: ", spec.name);
  HYTRA_ASSERT(bool(spec.set), "flag without a setter: ", spec.name);
  std::vector<std::string> names = spec.aliases;
  names.push_back(spec.name);
  for (const auto& n : names) {
    HYTRA_ASSERT(n != "--config" && n != "--help", "reserved flag name: ", n);
    HYTRA_ASSERT(index_.emplace(canonical(n), specs_.size()).second, "flag defined twice: ", n);
  }
  if (spec.value) spec.initial = spec.value();
  specs_.push_back(std::move(spec));
}

void FlagTable::alias(const std::string& name, const std::string& other) {
  auto it = index_.find(canonical(name));
  HYTRA_ASSERT(it != index_.end(), "alias for an unknown flag: ", name);
  HYTRA_ASSERT(other.rfind("--", 0) == 0, "flag name must start with --: ", other);
  HYTRA_ASSERT(index_.emplace(canonical(other), it->second).second, "flag defined twice: ", other);
  specs_[it->second].aliases.push_back(other);
}

const FlagSpec* FlagTable::find(const std::string& name) const {
  auto it = index_.find(canonical(name));
  return it == index_.end() ? nullptr : &specs_[it->second];
}

std::string FlagTable::suggest(const std::string& name) const {
  std::string bare = name.substr(std::min(name.find_first_not_of('-'), name.size()));
  const std::string wanted = canonical("--" + bare);
  std::string best;
  size_t best_d = std::max<size_t>(2, bare.size() / 3) + 1;
  for (const auto& [known, row] : index_) {
    const size_t d = edit_distance(wanted, known);
    if (d < best_d) best_d = d, best = known;
  }
  return best;
}

bool FlagTable::is_set(const std::string& name) const {
  const FlagSpec* s = find(name);
  HYTRA_ASSERT(s != nullptr, "is_set of an unknown flag: ", name);
  return given_.count(s->name) > 0;
}

const FlagValues* FlagTable::given(const std::string& name) const {
  const FlagSpec* s = find(name);
  HYTRA_ASSERT(s != nullptr, "given of an unknown flag: ", name);
  auto it = given_.find(s->name);
  return it == given_.end() ? nullptr : &it->second;
}

std::optional<FlagValues> FlagTable::value_of(const std::string& name) const {
  const FlagSpec* s = find(name);
  HYTRA_ASSERT(s != nullptr, "value_of an unknown flag: ", name);
  return s->value ? s->value() : std::nullopt;
}

void FlagTable::check(const FlagSpec& s, const FlagValues& values) const {
  if (!is_list(s.kind)) {
    HYTRA_CHECK(values.size() == 1, s.name, ": expected a single value, got ", values.size(), " values");
  } else {
    const int n = int(values.size());
    const bool exact = s.min_values == s.max_values;
    const std::string want = s.max_values < 0 ? str("at least ", s.min_values)
                             : exact          ? str(s.min_values)
                                              : str(s.min_values, " to ", s.max_values);
    HYTRA_CHECK(n >= s.min_values && (s.max_values < 0 || n <= s.max_values), s.name, ": expected ", want,
                exact && s.min_values == 1 ? " value" : " values", ", got ", n);
  }
  for (const auto& v : values) {
    switch (s.kind) {
      case Kind::Int:
      case Kind::IntList:
        parse_int_value(s.name, v);
        break;
      case Kind::Float:
      case Kind::FloatList:
        parse_float_value(s.name, v);
        break;
      case Kind::Bool:
        parse_bool_value(s.name, v);
        break;
      case Kind::String:
      case Kind::StringList:
        HYTRA_CHECK(s.choices.empty() || std::count(s.choices.begin(), s.choices.end(), v), s.name,
                    ": expected one of ", join(s.choices, ", "), ", got '", v, "'");
        break;
    }
  }
}

void FlagTable::apply(const FlagSpec& s, const FlagValues& values) {
  try {
    s.set(values);
  } catch (const Error& err) {
    const std::string msg = err.what();
    if (msg.rfind(s.name + ":", 0) == 0) throw;
    fail(str(s.name, ": ", msg.rfind(": ", 0) == 0 ? msg.substr(2) : msg));
  }
  given_[s.name] = values;
}

void FlagTable::apply_config(const ConfigFile& file) {
  std::vector<std::pair<const FlagSpec*, const ConfigEntry*>> rows;
  for (const auto& e : file.entries) {
    const std::string where = str(file.path, ":", e.line, ": ");
    HYTRA_CHECK(e.key != "config", where, "--config inside a config file is not supported");
    const FlagSpec* s = find("--" + e.key);
    if (s == nullptr) {
      const std::string near = suggest(e.key);
      fail(str(where, "unknown key '", e.key, "'",
               near.empty() ? "" : str("; did you mean '", near.substr(2), "'?")));
    }
    using K = FlagSpec::Kind;
    const bool typed = s->kind != K::String && s->kind != K::StringList;
    for (size_t i = 0; i < e.quoted.size(); ++i)
      HYTRA_CHECK(!typed || !e.quoted[i], where, e.key, ": expected ",
                  s->kind == K::Bool ? "true or false" : s->kind == K::Float || s->kind == K::FloatList ? "a number" : "an integer",
                  ", got the string \"", e.values[i], "\" (TOML strings are quoted: write the value without quotes)");
    try {
      check(*s, e.values);
    } catch (const Error& err) {
      fail(where + err.what());
    }
    rows.emplace_back(s, &e);
  }
  for (const auto& [s, e] : rows) {
    try {
      apply(*s, e->values);
    } catch (const Error& err) {
      fail(str(file.path, ":", e->line, ": ", err.what()));
    }
  }
}

FlagTable::Result FlagTable::parse(const std::vector<std::string>& args) {
  Result result;
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      result.help = true;
      return result;
    }
  }
  std::vector<std::pair<const FlagSpec*, FlagValues>> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (tok == "--") {
      result.positionals.insert(result.positionals.end(), args.begin() + long(i) + 1, args.end());
      break;
    }
    if (!looks_like_flag(tok)) {
      result.positionals.push_back(tok);
      continue;
    }
    const size_t eq = tok.find('=');
    const std::string name = tok.substr(0, eq);
    const std::optional<std::string> inline_value =
        eq == std::string::npos ? std::nullopt : std::optional<std::string>(tok.substr(eq + 1));
    if (canonical(name) == "--config") {
      HYTRA_CHECK(result.config_path.empty(), "--config: given twice");
      if (inline_value)
        result.config_path = *inline_value;
      else if (i + 1 < args.size() && !looks_like_flag(args[i + 1]))
        result.config_path = args[++i];
      HYTRA_CHECK(!result.config_path.empty(), "--config: expected a file name");
      continue;
    }
    const FlagSpec* s = name.rfind("--", 0) == 0 ? find(name) : nullptr;
    if (s == nullptr) {
      const std::string near = suggest(name);
      fail(str("unknown flag ", name, near.empty() ? "" : str("; did you mean ", near, "?")));
    }
    FlagValues values;
    if (inline_value) {
      values.push_back(*inline_value);
    } else if (s->kind == Kind::Bool) {
      values.push_back("true");
    } else if (is_list(s->kind)) {
      while (i + 1 < args.size() && !looks_like_flag(args[i + 1]) && args[i + 1] != "--" &&
             (s->max_values < 0 || int(values.size()) < s->max_values))
        values.push_back(args[++i]);
    } else {
      HYTRA_CHECK(i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0, s->name, ": expected a value",
                  i + 1 < args.size() ? str(", got the flag ", args[i + 1]) : "");
      values.push_back(args[++i]);
    }
    check(*s, values);
    given.emplace_back(s, std::move(values));
  }
  if (positionals_help_.empty() && !result.positionals.empty())
    fail(str("unexpected argument '", result.positionals[0], "' (flags start with --)"));
  if (!result.config_path.empty()) apply_config(read_config_file(result.config_path));
  for (const auto& [s, values] : given) apply(*s, values);
  return result;
}

std::string FlagTable::help_text(const std::string& usage) const {
  constexpr size_t kHelpColumn = 40;
  std::string out = "usage: " + usage + " [flags]" +
                    (positionals_help_.empty() ? "" : " " + positionals_help_) + "\n\nflags:\n";
  auto row = [&out](const std::string& left, const std::string& text) {
    out += "  " + left;
    if (left.size() + 2 < kHelpColumn)
      out += std::string(kHelpColumn - left.size() - 2, ' ');
    else
      out += "\n" + std::string(kHelpColumn, ' ');
    out += text + "\n";
  };
  row("--help, -h", "print this table and exit");
  row("--config FILE", "read flags from a .yaml/.yml/.toml file; command-line flags override it");
  for (const auto& s : specs_) {
    std::string left = s.name;
    for (const auto& a : s.aliases) left += ", " + a;
    const std::string mv = metavar(s);
    if (!mv.empty()) left += " " + mv;
    const std::optional<FlagValues> v = s.value ? s.value() : std::nullopt;
    const std::string def = !s.default_text.empty() ? s.default_text : !s.value ? "" : v ? join(*v, " ") : "None";
    row(left, s.help + (def.empty() ? "" : " (default: " + def + ")"));
  }
  return out;
}

namespace {
// A YAML double-quoted scalar: backslash and quote escaped, control bytes as \xNN (UTF-8 passes through).
std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace

std::string FlagTable::resolved_yaml(const std::string& header) const {
  std::string out;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) out += "# " + line + "\n";
  for (const FlagSpec& s : specs_) {
    if (!s.value) continue;
    const std::optional<FlagValues> v = s.value();
    if (!v || (!s.default_text.empty() && v == s.initial)) continue;
    const bool text = s.kind == Kind::String || s.kind == Kind::StringList;
    std::string items;
    for (const std::string& x : *v) items += (items.empty() ? "" : ", ") + (text ? yaml_quoted(x) : x);
    out += s.name.substr(2) + ": " + (is_list(s.kind) ? "[" + items + "]" : items) + "\n";
  }
  return out;
}

}  // namespace hytra
