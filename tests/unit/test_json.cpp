// core/json: values and escapes, key order, duplicate keys, error offsets, the nesting limit and
// exact integers.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "common/error_of.h"
#include "core/error.h"
#include "core/json.h"

namespace hytra {
namespace {

using test::error_of;

std::string parse_error(const std::string& text) {
  return error_of([&] { Json::parse(text); });
}

TEST(Json, ParsesValuesEscapesAndSurrogates) {
  Json j = Json::parse(
      " {\"a\": [1, -2.5e1, true, false, null], \"s\": \"x\\n\\\"\\u00e9\\ud83d\\ude00\\/\", "
      "\"o\": {}} ");
  ASSERT_TRUE(j.is_object());
  const auto& a = j.at("a").as_array();
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0].as_int(), 1);
  EXPECT_EQ(a[1].as_number(), -25.0);
  EXPECT_TRUE(a[2].as_bool());
  EXPECT_FALSE(a[3].as_bool());
  EXPECT_TRUE(a[4].is_null());
  EXPECT_EQ(j.at("s").as_string(), "x\n\"\xC3\xA9\xF0\x9F\x98\x80/");
  EXPECT_TRUE(j.at("o").as_object().empty());
  EXPECT_EQ(j.find("missing"), nullptr);
  EXPECT_NE(error_of([&] { j.at("missing"); }).find("missing key 'missing'"), std::string::npos);
  EXPECT_EQ(error_of([&] { j.at("s").as_array("s"); }), "s: expected an array, got string");
}

TEST(Json, ObjectsKeepFileOrder) {
  const Json j = Json::parse("{\"b\": 1, \"a\": 2, \"c\": {\"z\": 0, \"y\": 1}}");
  std::string keys;
  for (const auto& [k, v] : j.as_object()) keys += k;
  for (const auto& [k, v] : j.at("c").as_object()) keys += k;
  EXPECT_EQ(keys, "baczy");
}

// A key repeated in one object is refused at the offset of its second occurrence, whatever came
// before it; the same key in different objects is fine.
TEST(Json, DuplicateKeysAreRefused) {
  EXPECT_EQ(parse_error("{\"a\": 1, \"a\": 2}"), "JSON parse error at byte offset 9: duplicate key 'a'");
  EXPECT_EQ(parse_error("{\"a\":1,\"a\":2}"), "JSON parse error at byte offset 7: duplicate key 'a'");
  EXPECT_EQ(parse_error("{\"a\":\"x\",\"a\":\"y\"}"), "JSON parse error at byte offset 9: duplicate key 'a'");
  EXPECT_EQ(parse_error("{\"a\": {}, \"a\": null}"), "JSON parse error at byte offset 10: duplicate key 'a'");
  EXPECT_EQ(parse_error("{\"o\": {\"k\": [1], \"k\": {}}}"), "JSON parse error at byte offset 17: duplicate key 'k'");
  // Keys compare after unescaping.
  EXPECT_EQ(parse_error("{\"\\u0061\": true, \"a\": false}"), "JSON parse error at byte offset 17: duplicate key 'a'");
  EXPECT_EQ(parse_error("[{\"a\": 1}, {\"a\": 2}]"), "");
  EXPECT_EQ(parse_error("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}"), "");

  const std::string path = testing::TempDir() + "hytra_json_dup.json";
  std::ofstream(path) << "{\"model.safetensors\": 1,\n \"model.safetensors\": 2}\n";
  EXPECT_EQ(error_of([&] { Json::parse_file(path); }),
            path + ": JSON parse error at byte offset 26: duplicate key 'model.safetensors'");
}

// Malformed input: the offset is that of the byte where the problem was found (the end of the text
// when it ends too early), followed by the parser's description.
TEST(Json, ErrorsNameTheByteOffset) {
  auto expect_error = [](const std::string& text, const std::string& head, const std::string& detail) {
    const std::string e = parse_error(text);
    EXPECT_EQ(e.rfind("JSON parse error at byte offset " + head + ": ", 0), 0u) << text << " -> " << e;
    EXPECT_NE(e.find(detail), std::string::npos) << text << " -> " << e;
  };
  expect_error("{\"a\": 1,}", "8", "unexpected '}'");
  expect_error("[1, 2", "5", "unexpected end of input");
  expect_error("", "0", "unexpected end of input");
  expect_error("[1] 2", "4", "expected end of input");
  expect_error("{\"a\" 1}", "5", "expected ':'");
  expect_error("tru", "3", "invalid literal");
  expect_error("[-]", "2", "expected digit after '-'");
  expect_error("\"\\ud83d x\"", "7", "surrogate");
  expect_error("[\"\\q\"]", "3", "forbidden character after backslash");
  expect_error("\"ab\x01\"", "3", "control character U+0001");
  expect_error("[\"\xff\"]", "2", "ill-formed UTF-8");
  expect_error("[1e400]", "5", "number overflow parsing '1e400'");  // JSON has no infinity

  const std::string path = testing::TempDir() + "hytra_json_bad.json";
  std::ofstream(path) << "{\"a\": [1, 2}";
  EXPECT_EQ(error_of([&] { Json::parse_file(path); }).rfind(path + ": JSON parse error at byte offset 11: ", 0), 0u);
  const std::string missing = testing::TempDir() + "hytra_json_missing.json";
  EXPECT_EQ(error_of([&] { Json::parse_file(missing); }), "cannot open JSON file '" + missing + "'");
}

// 512 levels of arrays and objects parse; one more is refused at the bracket that opens it.
TEST(Json, NestingIsLimitedTo512Levels) {
  auto nested = [](int levels) {
    std::string open, close;
    for (int i = 0; i < levels; ++i) {
      open += i % 2 ? "{\"k\":" : "[";
      close = (i % 2 ? "}" : "]") + close;
    }
    return open + "1" + close;
  };
  const Json j = Json::parse(nested(512));
  EXPECT_EQ(j.as_array()[0].at("k").as_array().size(), 1u);
  const std::string deep = nested(513);
  EXPECT_EQ(parse_error(deep), "JSON parse error at byte offset " + std::to_string(deep.find("1") - 1) +
                                   ": nesting deeper than 512 levels");
}

// Integer literals are exact over all of int64; other numbers are integers only while a double is
// exact (below 2^53).
TEST(Json, IntegersAreExact) {
  auto as_int = [](const std::string& text) { return Json::parse(text).as_int("n"); };
  EXPECT_EQ(as_int("9007199254740993"), 9007199254740993);  // 2^53 + 1: a double would round it
  EXPECT_EQ(Json::parse("9007199254740993").as_number(), 9007199254740992.0);
  EXPECT_EQ(as_int("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(as_int("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(as_int("-0"), 0);
  EXPECT_EQ(as_int("1e3"), 1000);
  EXPECT_EQ(as_int("2.0"), 2);
  EXPECT_EQ(as_int("-4.5e1"), -45);
  EXPECT_EQ(error_of([&] { as_int("9223372036854775808"); }), "n: expected an integer, got 9.2233720368547758e+18");
  EXPECT_EQ(error_of([&] { as_int("-9223372036854775809"); }), "n: expected an integer, got -9.2233720368547758e+18");
  EXPECT_EQ(Json::parse("18446744073709551615").as_number(), 18446744073709551615.0);
  EXPECT_EQ(error_of([&] { as_int("1e16"); }), "n: expected an integer, got 1e+16");
  EXPECT_EQ(error_of([&] { as_int("2.5"); }), "n: expected an integer, got 2.5");
  EXPECT_EQ(error_of([&] { as_int("\"7\""); }), "n: expected a number, got string");
}

}  // namespace
}  // namespace hytra
