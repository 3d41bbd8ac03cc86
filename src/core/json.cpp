// Recursive-descent JSON parser for core/json.h, and exact number text.
#include "core/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/utf8.h"

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

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  Json parse_document() {
    Json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;

  [[noreturn]] void error(const std::string& what) const {
    fail(str("JSON parse error at byte offset ", pos_, ": ", what));
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  void expect_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) error(str("expected '", lit, "'"));
    pos_ += lit.size();
  }

  Json value(int depth) {
    if (depth > kMaxDepth) error("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) error("unexpected end of input, expected a value");
    Json v;
    char c = s_[pos_];
    if (c == '{') {
      v.type_ = Json::Type::Object;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a string key");
        std::string key = string();
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') error("expected ':' after object key");
        ++pos_;
        v.object_.emplace_back(std::move(key), value(depth + 1));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
        } else if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return v;
        } else {
          error("expected ',' or '}' in object");
        }
      }
    }
    if (c == '[') {
      v.type_ = Json::Type::Array;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.array_.push_back(value(depth + 1));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
        } else if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return v;
        } else {
          error("expected ',' or ']' in array");
        }
      }
    }
    if (c == '"') {
      v.type_ = Json::Type::String;
      v.string_ = string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.type_ = Json::Type::Bool;
      v.bool_ = c == 't';
      expect_literal(v.bool_ ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      expect_literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.type_ = Json::Type::Number;
      v.number_ = number();
      return v;
    }
    error(str("unexpected character '", c, "'"));
  }

  double number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == d) error("expected a digit");
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    std::string text(s_.substr(start, pos_ - start));
    return std::strtod(text.c_str(), nullptr);
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error("unterminated string");
      char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") error("high surrogate not followed by a \\u low surrogate");
            pos_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("invalid low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("unpaired low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; error(str("invalid escape '\\", e, "'"));
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

Json Json::parse(std::string_view text) { return JsonParser(text).parse_document(); }

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
  double d = as_number(what);
  HYTRA_CHECK(std::floor(d) == d && std::fabs(d) < 9.0e15, what, ": expected an integer, got ", d);
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
