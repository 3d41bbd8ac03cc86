// core/json.h: the DOM built from nlohmann-json's SAX parser, the accessors, and the writer helpers
// (json_quote, exact_number_text).
#include "core/json.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <istream>
#include <sstream>
#include <streambuf>
#include <unordered_set>

#include "core/error.h"

namespace hytra {

const char* json_type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "bool";
    case Json::Type::Number: return "number";
    case Json::Type::String: return "string";
    case Json::Type::Array: return "array";
    case Json::Type::Object: return "object";
  }
  return "?";
}

namespace {

// The text as a stream buffer: nlohmann reads it byte by byte, and offset() tells how far it got,
// which its SAX events do not say.
class TextBuf : public std::streambuf {
 public:
  explicit TextBuf(std::string_view s) {
    char* p = const_cast<char*>(s.data());  // only read: nothing is written or put back
    setg(p, p, p + s.size());
  }
  size_t offset() const { return size_t(gptr() - eback()); }
};

[[noreturn]] void parse_fail(size_t offset, const std::string& what) {
  fail(str("JSON parse error at byte offset ", offset, ": ", what));
}

}  // namespace

// Builds the DOM from nlohmann's SAX events, so that keys keep their file order and a repeated key
// is refused (nlohmann's own DOM keeps the last value silently). The containers being filled are a
// stack, so deep nesting costs no recursion while parsing; kMaxDepth bounds it for the recursive
// destructor and copies of Json.
class JsonBuilder {
 public:
  JsonBuilder(std::string_view text, const TextBuf& buf) : text_(text), buf_(buf) {}
  Json root;

  bool null() { return add(Json()); }
  bool boolean(bool b) {
    Json v;
    v.type_ = Json::Type::Bool;
    v.bool_ = b;
    return add(std::move(v));
  }
  bool number_integer(int64_t i) {
    Json v = number(double(i));
    v.is_int_ = true;
    v.int_ = i;
    return add(std::move(v));
  }
  bool number_unsigned(uint64_t u) {
    if (u <= uint64_t(INT64_MAX)) return number_integer(int64_t(u));
    return add(number(double(u)));
  }
  bool number_float(double d, const std::string&) { return add(number(d)); }
  bool string(std::string& s) {
    Json v;
    v.type_ = Json::Type::String;
    v.string_ = std::move(s);
    return add(std::move(v));
  }
  bool binary(nlohmann::json::binary_t&) { return true; }  // part of the interface; JSON text has none
  bool start_object(size_t) { return open(Json::Type::Object); }
  bool start_array(size_t) { return open(Json::Type::Array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    if (!stack_.back().keys.insert(k).second) {
      // The event comes after the key's closing quote; between the previous event and the key's
      // opening quote lie only whitespace and a comma.
      parse_fail(text_.find('"', mark_), str("duplicate key '", k, "'"));
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // position counts the bytes read, the one where the problem showed (or the end of the text)
    // included; e reads "[json.exception.parse_error.101] parse error at line 1, column 9: <problem>".
    std::string_view what = e.what();
    if (size_t p = what.find("] "); p != what.npos) what.remove_prefix(p + 2);
    if (size_t p = what.find(": "); what.starts_with("parse error") && p != what.npos) what.remove_prefix(p + 2);
    parse_fail(position > 0 ? position - 1 : 0, std::string(what));
  }

 private:
  static constexpr size_t kMaxDepth = 512;

  struct Open {
    Json* value;
    std::unordered_set<std::string> keys;  // an object's keys so far
  };

  static Json number(double d) {
    Json v;
    v.type_ = Json::Type::Number;
    v.number_ = d;
    return v;
  }

  // Puts v into the innermost open container (or makes it the root) and returns where it lives.
  Json& place(Json v) {
    mark_ = buf_.offset();
    if (stack_.empty()) return root = std::move(v);
    Json& c = *stack_.back().value;
    if (c.type_ == Json::Type::Array) return c.array_.emplace_back(std::move(v));
    return c.object_.emplace_back(std::move(key_), std::move(v)).second;
  }

  bool add(Json v) {
    place(std::move(v));
    return true;
  }

  bool open(Json::Type t) {
    if (stack_.size() == kMaxDepth) parse_fail(buf_.offset() - 1, str("nesting deeper than ", kMaxDepth, " levels"));
    Json v;
    v.type_ = t;
    stack_.push_back({&place(std::move(v)), {}});  // stays valid: only the innermost container grows
    return true;
  }

  bool close() {
    stack_.pop_back();
    mark_ = buf_.offset();
    return true;
  }

  std::string_view text_;
  const TextBuf& buf_;
  std::vector<Open> stack_;
  std::string key_;  // the key of the next member of the innermost object
  size_t mark_ = 0;  // the offset just after the previous event's token
};

Json Json::parse(std::string_view text) {
  TextBuf buf(text);
  std::istream in(&buf);
  JsonBuilder b(text, buf);
  nlohmann::json::sax_parse(in, &b);  // every error throws from the builder
  return std::move(b.root);
}

Json Json::parse_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), "cannot open JSON file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return parse(ss.str());
  } catch (const Error& e) {
    fail(str(path, ": ", e.what()));
  }
}

bool Json::as_bool(const char* what) const {
  HYTRA_CHECK(type_ == Type::Bool, what, ": expected a bool, got ", json_type_name(type_));
  return bool_;
}

double Json::as_number(const char* what) const {
  HYTRA_CHECK(type_ == Type::Number, what, ": expected a number, got ", json_type_name(type_));
  return number_;
}

int64_t Json::as_int(const char* what) const {
  const double d = as_number(what);
  if (is_int_) return int_;
  HYTRA_CHECK(std::floor(d) == d && std::fabs(d) < 9.0e15, what, ": expected an integer, got ", exact_number_text(d));
  return int64_t(d);
}

const std::string& Json::as_string(const char* what) const {
  HYTRA_CHECK(type_ == Type::String, what, ": expected a string, got ", json_type_name(type_));
  return string_;
}

const std::vector<Json>& Json::as_array(const char* what) const {
  HYTRA_CHECK(type_ == Type::Array, what, ": expected an array, got ", json_type_name(type_));
  return array_;
}

const std::vector<std::pair<std::string, Json>>& Json::as_object(const char* what) const {
  HYTRA_CHECK(type_ == Type::Object, what, ": expected an object, got ", json_type_name(type_));
  return object_;
}

const Json* Json::find(std::string_view key) const {
  for (const auto& [k, v] : as_object()) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  const Json* v = find(key);
  HYTRA_CHECK(v != nullptr, "missing key '", key, "'");
  return *v;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string exact_number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace hytra
