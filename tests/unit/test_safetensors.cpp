// safetensors (docs/spec/safetensors.md): the writer's exact bytes (ordering, compact JSON, padding), round trips,
// and every header validation error.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace hytra {
namespace {

std::string tmp(const std::string& n) { return testing::TempDir() + "hytra_st_" + n + ".safetensors"; }

std::vector<unsigned char> bytes_of(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A file from a raw header string and a data buffer.
std::string raw_file(const std::string& name, const std::string& header, size_t data_bytes) {
  const std::string p = tmp(name);
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(data_bytes, '\x01');
  return p;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, WriterBytesFollowTheReferenceConventions) {
  std::vector<SafetensorsTensor> t = {
      {"b", "F32", {2}, std::vector<unsigned char>(8, 0xAB)},
      {"a", "BF16", {3}, {1, 2, 3, 4, 5, 6}},
      {"c", "I64", {}, std::vector<unsigned char>(8, 7)},
      {"z", "U8", {0}, {}},
  };
  const std::string p = tmp("conv");
  write_safetensors(p, t, {{"format", "pt"}});
  // Alignment descending (I64, F32, BF16, U8), compact JSON, __metadata__ first, padded to 8.
  std::string want =
      "{\"__metadata__\":{\"format\":\"pt\"},\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
      "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[22,22]}}";
  while (want.size() % 8) want += ' ';
  const auto bytes = bytes_of(p);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(n, want.size());
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.begin() + 8 + long(n)), want);
  EXPECT_EQ(bytes.size(), 8 + n + 22);

  SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.entries().size(), 4u);
  const SafetensorsEntry* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(std::vector<unsigned char>(f.data(*a), f.data(*a) + 6), (std::vector<unsigned char>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(f.find("c")->shape.empty());
  EXPECT_EQ(f.find("z")->begin, f.find("z")->end);
  EXPECT_EQ(safetensors_dtype_bits("F8_E4M3"), 8);
  EXPECT_EQ(safetensors_dtype_bits("F4"), 4);
  EXPECT_EQ(safetensors_dtype_bits("F17"), 0);
}

TEST(Safetensors, HeaderValidationErrors) {
  const std::string ok = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  EXPECT_EQ(error_of(raw_file("ok", ok, 8)), "");
  EXPECT_NE(error_of(raw_file("trailing", ok, 9)).find("1 trailing bytes"), std::string::npos);
  EXPECT_NE(error_of(raw_file("short", ok, 4)).find("outside the 4-byte data buffer"), std::string::npos);
  EXPECT_NE(error_of(raw_file("dtype", "{\"x\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8))
                .find("unknown dtype 'F33'"),
            std::string::npos);
  EXPECT_NE(error_of(raw_file("size", "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8))
                .find("needs 12"),
            std::string::npos);
  const std::string two = "{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                          "\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}";
  EXPECT_NE(error_of(raw_file("gap", two, 5)).find("leaving a gap"), std::string::npos);
  const std::string overlap = "{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                              "\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}";
  EXPECT_NE(error_of(raw_file("overlap", overlap, 3)).find("overlapping"), std::string::npos);
  const std::string dup = "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                          "\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
  const std::string dup_file = raw_file("dup", dup, 2);  // refused by the JSON parser: no key may repeat
  EXPECT_EQ(error_of(dup_file), dup_file + ": header: JSON parse error at byte offset 53: duplicate key 'x'");
  EXPECT_NE(error_of(raw_file("meta", "{\"__metadata__\":{\"a\":1}}", 0)).find("must be a string"), std::string::npos);
  EXPECT_NE(error_of(raw_file("json", "{\"x\":", 0)).find("header"), std::string::npos);
  EXPECT_NE(error_of(raw_file("array", "[1]", 0)).find("must be a JSON object"), std::string::npos);
  {
    std::ofstream f(tmp("tiny"), std::ios::binary);
    f << "abc";
  }
  EXPECT_NE(error_of(tmp("tiny")).find("truncated"), std::string::npos);
  {
    std::ofstream f(tmp("huge"), std::ios::binary);
    const uint64_t n = 200000000;
    f.write(reinterpret_cast<const char*>(&n), 8);
  }
  EXPECT_NE(error_of(tmp("huge")).find("exceeds the format's limit"), std::string::npos);
  EXPECT_NE(error_of(tmp("missing-file")).find("cannot open"), std::string::npos);
  // Type errors inside the header name the file too (they used to read "shape entry: ..." alone).
  const std::string frac = raw_file("frac", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4);
  EXPECT_EQ(error_of(frac), frac + ": header: shape entry: expected an integer, got 1.5");
  const std::string inf = raw_file("inf", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1e400],\"data_offsets\":[0,4]}}", 4);
  EXPECT_EQ(error_of(inf), inf + ": header: JSON parse error at byte offset 33: number overflow parsing '1e400'");
  const std::string meta = raw_file("meta-array", "{\"__metadata__\":[1]}", 0);
  EXPECT_EQ(error_of(meta), meta + ": header: __metadata__: expected an object, got array");
  // A directory or a FIFO is not read (a FIFO without a writer used to block the open forever).
  const std::string dir = testing::TempDir() + "hytra_st_dir.safetensors";
  std::filesystem::create_directories(dir);
  EXPECT_NE(error_of(dir).find("not a regular file"), std::string::npos);
  const std::string fifo = testing::TempDir() + "hytra_st_fifo.safetensors";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo).find("not a regular file"), std::string::npos);
  std::filesystem::remove(fifo);
}

TEST(Safetensors, WriterRejectsBadTensorsAndLeavesNoFile) {
  const std::string p = tmp("bad");
  std::remove(p.c_str());
  EXPECT_THROW(write_safetensors(p, {{"w", "F32", {2}, std::vector<unsigned char>(7)}}, {}), Error);
  EXPECT_THROW(write_safetensors(p, {{"w", "U8", {1}, {1}}, {"w", "U8", {1}, {2}}}, {}), Error);
  EXPECT_FALSE(std::ifstream(p).good());
  EXPECT_FALSE(std::ifstream(p + ".tmp").good());
}

std::string hex(const std::vector<unsigned char>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

std::string run_py(const std::string& args, const std::string& input = "") {
  const std::string in = testing::TempDir() + "hytra_st_py_in.json", out = testing::TempDir() + "hytra_st_py_out.json";
  std::ofstream(in) << input;
  const std::string cmd = std::string("python3 ") + HYTRA_SOURCE_DIR + "/tests/unit/safetensors_ref.py " + args + " < " +
                          in + " > " + out;
  if (std::system(cmd.c_str()) != 0) return "ERROR";
  std::ifstream f(out);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Both directions against the independent reader/writer of safetensors_ref.py (stdlib only).
TEST(Safetensors, BothDirectionsAgainstAnIndependentImplementation) {
  const std::vector<SafetensorsTensor> tensors = {
      {"decoder.layers.0.mlp.linear_fc1.weight", "BF16", {2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
      {"embedding.word_embeddings.weight", "F32", {1, 2}, {0, 0, 128, 63, 0, 0, 0, 64}},
      {"step", "I64", {}, {5, 0, 0, 0, 0, 0, 0, 0}},
      {"mask", "U8", {3}, {1, 0, 1}},
  };
  const std::string p = tmp("interop_hytra");
  write_safetensors(p, tensors, {{"format", "pt"}});
  // What the reference reads from hytra's file.
  const std::string read_back = run_py("read " + p);
  ASSERT_NE(read_back, "ERROR");
  for (const auto& t : tensors)
    EXPECT_NE(read_back.find("\"" + t.name + "\": [\"" + t.dtype + "\""), std::string::npos) << t.name;
  for (const auto& t : tensors) EXPECT_NE(read_back.find(hex(t.bytes)), std::string::npos) << t.name;
  // The reference writes the same tensors: byte-identical to hytra's file, and hytra reads it.
  std::string spec = "{\"metadata\": {\"format\": \"pt\"}, \"tensors\": {";
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    std::string shape = "[";
    for (size_t k = 0; k < t.shape.size(); ++k) shape += (k ? ", " : "") + std::to_string(t.shape[k]);
    spec += (i ? ", " : "") + ("\"" + t.name + "\": [\"" + t.dtype + "\", " + shape + "], \"" + hex(t.bytes) + "\"]");
  }
  spec += "}}";
  const std::string q = tmp("interop_ref");
  ASSERT_NE(run_py("write " + q, spec), "ERROR");
  EXPECT_EQ(bytes_of(q), bytes_of(p));
  SafetensorsFile f(q);
  for (const auto& t : tensors) {
    const SafetensorsEntry* e = f.find(t.name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(std::vector<unsigned char>(f.data(*e), f.data(*e) + (e->end - e->begin)), t.bytes);
  }
}

}  // namespace
}  // namespace hytra
