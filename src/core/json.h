// A small JSON DOM (RFC 8259) read with nlohmann-json, which stays inside json.cpp: objects (keys
// kept in file order; a key repeated in one object is a parse error), arrays, strings (UTF-8),
// numbers (double, plus the exact value of an integer literal within int64), true/false/null.
// Parse errors throw hytra::Error naming the byte offset and the problem. Used for tokenizer files
// (docs/spec/tokenizers.md), safetensors headers, checkpoint manifests and JSON Lines documents.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hytra {

class Json {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };

  Json() = default;
  static Json parse(std::string_view text);         // the whole text must be one value (plus whitespace)
  static Json parse_file(const std::string& path);  // errors name the file

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_string() const { return type_ == Type::String; }
  bool is_number() const { return type_ == Type::Number; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed accessors throw hytra::Error (naming `what`) when the type does not match.
  bool as_bool(const char* what = "value") const;
  double as_number(const char* what = "value") const;
  // An integer literal within int64 (exact), or another number with an integral value below 2^53
  // in magnitude (2.0, 1e3), where a double is still exact.
  int64_t as_int(const char* what = "value") const;
  const std::string& as_string(const char* what = "value") const;
  const std::vector<Json>& as_array(const char* what = "value") const;
  const std::vector<std::pair<std::string, Json>>& as_object(const char* what = "value") const;

  // Object member lookup; find returns nullptr when absent, at throws naming the key.
  const Json* find(std::string_view key) const;
  const Json& at(std::string_view key) const;

 private:
  friend class JsonBuilder;
  Type type_ = Type::Null;
  bool bool_ = false;
  bool is_int_ = false;  // an integer literal within int64: int_ holds it exactly
  int64_t int_ = 0;
  double number_ = 0.0;
  std::string string_;
  std::vector<Json> array_;
  std::vector<std::pair<std::string, Json>> object_;
};

const char* json_type_name(Json::Type t);

// v as the shortest of %.15g / %.17g that reads back as exactly v ("1e-05", "0.10000000000000001").
std::string exact_number_text(double v);

// s as a JSON string literal: quotes, backslash escapes, \u00XX for control characters.
std::string json_quote(const std::string& s);

}  // namespace hytra
