// Megatron's .bin/.idx files: the worked example of docs/spec/indexed_dataset.md §5 byte for byte, round trips for every dtype,
// empty documents, merging, corruption errors, and both directions against an independent numpy
// implementation (indexed_dataset_ref.py).
#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace hytra {
namespace {

std::string tmp(const std::string& name) { return testing::TempDir() + "hytra_idx_" + name; }

std::vector<unsigned char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

std::string error_of(const std::string& prefix) {
  try {
    IndexedDataset d(prefix);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IndexedDataset, WorkedExampleByteForByte) {
  const std::string p = tmp("example");
  IndexedDatasetWriter w(p, TokenDtype::U16);
  w.add_document({10, 11, 12});
  w.add_document({13, 50256});
  w.finalize();
  EXPECT_EQ(bytes_of(p + ".bin"), (std::vector<unsigned char>{0x0A, 0, 0x0B, 0, 0x0C, 0, 0x0D, 0, 0x50, 0xC4}));
  std::vector<unsigned char> idx = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8};
  auto u64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) idx.push_back(uint8_t(v >> (8 * i)));
  };
  u64(2);
  u64(3);
  for (uint8_t b : {3, 0, 0, 0, 2, 0, 0, 0}) idx.push_back(b);
  u64(0);
  u64(6);
  u64(0);
  u64(1);
  u64(2);
  EXPECT_EQ(idx.size(), 82u);
  EXPECT_EQ(bytes_of(p + ".idx"), idx);
  IndexedDataset d(p);
  EXPECT_EQ(d.num_sequences(), 2);
  EXPECT_EQ(d.num_documents(), 2);
  EXPECT_EQ(d.num_tokens(), 5);
  EXPECT_EQ(d.sequence(1), (std::vector<int32_t>{13, 50256}));
}

TEST(IndexedDataset, RoundTripsEveryDtypeWithEmptyDocumentsAndMerges) {
  for (uint8_t code = 1; code <= 8; ++code) {
    const std::string p = tmp("rt" + std::to_string(code));
    IndexedDatasetWriter w(p, TokenDtype(code));
    w.add_document({1, 2, 3, 4, 5}, {2, 3});  // two sentences
    w.add_document({});                       // empty: a repeated boundary
    w.add_document({7, 100, 127});
    w.finalize();
    IndexedDataset d(p);
    EXPECT_EQ(d.num_sequences(), 3) << int(code);
    EXPECT_EQ(d.document_indices(), (std::vector<int64_t>{0, 2, 2, 3})) << int(code);
    EXPECT_EQ(d.sequence(1), (std::vector<int32_t>{3, 4, 5}));
    EXPECT_EQ(d.sequence(2), (std::vector<int32_t>{7, 100, 127}));
  }
  const std::string m = tmp("merged");
  IndexedDatasetWriter w(m, TokenDtype::U16);
  w.add_document({9});
  w.add_index(IndexedDataset(tmp("rt8")));
  w.finalize();
  IndexedDataset d(m);
  EXPECT_EQ(d.document_indices(), (std::vector<int64_t>{0, 1, 3, 3, 4}));
  EXPECT_EQ(d.sequence(3), (std::vector<int32_t>{7, 100, 127}));
  EXPECT_EQ(optimal_token_dtype(50257), TokenDtype::U16);
  EXPECT_EQ(optimal_token_dtype(128256), TokenDtype::I32);
}

TEST(IndexedDataset, CorruptFilesAreNamedErrors) {
  const std::string p = tmp("good");
  IndexedDatasetWriter w(p, TokenDtype::U16);
  w.add_document({10, 11, 12});
  w.add_document({13, 50256});
  w.finalize();
  const auto idx = bytes_of(p + ".idx"), bin = bytes_of(p + ".bin");
  auto variant = [&](const std::string& name, std::vector<unsigned char> i, std::vector<unsigned char> b) {
    const std::string q = tmp(name);
    write_bytes(q + ".idx", i);
    write_bytes(q + ".bin", b);
    return error_of(q);
  };
  auto with = [&](size_t at, uint8_t v) {
    auto c = idx;
    c[at] = v;
    return c;
  };
  EXPECT_NE(variant("magic", with(0, 'X'), bin).find("MMIDIDX"), std::string::npos);
  EXPECT_NE(variant("version", with(9, 2), bin).find("unsupported version 2"), std::string::npos);
  EXPECT_NE(variant("dtype", with(17, 9), bin).find("unknown token dtype code 9"), std::string::npos);
  EXPECT_NE(variant("trunc_idx", std::vector<unsigned char>(idx.begin(), idx.end() - 2), bin).find("truncated"),
            std::string::npos);
  EXPECT_NE(variant("trunc_bin", idx, std::vector<unsigned char>(bin.begin(), bin.end() - 2)).find(".bin: truncated"),
            std::string::npos);
  EXPECT_NE(variant("pointer", with(34 + 8 + 8, 7), bin).find("starts at byte"), std::string::npos);
  EXPECT_NE(variant("docidx", with(82 - 8, 5), bin).find("last document index"), std::string::npos);
  EXPECT_NE(error_of(tmp("missing")).find("cannot open"), std::string::npos);
}

TEST(IndexedDataset, IdxValuesAreCheckedAgainstTheBin) {
  const std::string p = tmp("sizes");
  IndexedDatasetWriter w(p, TokenDtype::U16);
  w.add_document({10, 11, 12});
  w.add_document({13, 50256});
  w.finalize();
  const auto idx = bytes_of(p + ".idx"), bin = bytes_of(p + ".bin");
  // Header 34 bytes, then the two int32 lengths, the two int64 pointers, the document indices.
  auto with = [&](size_t at, std::vector<unsigned char> v) {
    auto c = idx;
    std::copy(v.begin(), v.end(), c.begin() + long(at));
    return c;
  };
  auto variant = [&](const std::string& name, const std::vector<unsigned char>& i) {
    const std::string q = tmp(name);
    write_bytes(q + ".idx", i);
    write_bytes(q + ".bin", bin);
    return error_of(q);
  };
  const std::string negative = variant("neg", with(38, {0xff, 0xff, 0xff, 0xff}));
  EXPECT_NE(negative.find(".idx: sequence 1 has negative length -1"), std::string::npos) << negative;
  const std::string huge = variant("huge", with(38, {0xff, 0xff, 0xff, 0x7f}));  // 2^31 - 1 tokens
  EXPECT_NE(huge.find(".bin: truncated: sequence 1 of"), std::string::npos) << huge;
  EXPECT_NE(huge.find("2147483647 tokens"), std::string::npos) << huge;
  const std::string past = variant("past", with(50, {0xe8, 0x03, 0, 0}));  // pointer 1000
  EXPECT_NE(past.find(".idx: sequence 1 starts at byte 1000"), std::string::npos) << past;
  // Reads outside a sequence are named errors, not internal ones.
  IndexedDataset d(p);
  int32_t out[4];
  for (auto [seq, offset, count] : {std::array<int64_t, 3>{2, 0, 1}, {-1, 0, 1}, {1, 1, 2}, {0, -1, 1}}) {
    try {
      d.read(seq, offset, count, out);
      ADD_FAILURE() << seq << " " << offset << " " << count;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p + ".bin: cannot read tokens"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("internal error"), std::string::npos) << msg;
    }
  }
}

TEST(IndexedDataset, TokensBeyondInt32Saturate) {
  // int64 and float tokens outside int32 must not wrap into a valid id (2^32 + 5 is not token 5).
  for (TokenDtype t : {TokenDtype::I64, TokenDtype::F64}) {
    const std::string p = tmp("wide" + std::to_string(int(t)));
    IndexedDatasetWriter w(p, t);
    w.add_document({1, 2, 3});
    w.finalize();
    auto bin = bytes_of(p + ".bin");
    const int64_t big = (int64_t(1) << 32) + 5, neg = -(int64_t(1) << 40);
    const double nan = std::nan("");
    if (t == TokenDtype::I64) {
      std::memcpy(bin.data(), &big, 8);
      std::memcpy(bin.data() + 8, &neg, 8);
    } else {
      const double b = double(big);
      std::memcpy(bin.data(), &b, 8);
      std::memcpy(bin.data() + 8, &nan, 8);
    }
    write_bytes(p + ".bin", bin);
    EXPECT_EQ(IndexedDataset(p).sequence(0), (std::vector<int32_t>{INT32_MAX, INT32_MIN, 3})) << int(t);
  }
}

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0; }

std::string script() { return std::string("/usr/bin/python3 ") + HYTRA_SOURCE_DIR + "/tests/unit/indexed_dataset_ref.py"; }

std::string run(const std::string& cmd) {
  std::string out;
  std::FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  pclose(f);
  return out;
}

// The dataset as the reference script prints it, built from hytra's reader.
std::string as_json(const IndexedDataset& d) {
  std::ostringstream os;
  auto list = [&](auto&& get, int64_t n) {
    os << "[";
    for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << get(i);
    os << "]";
  };
  os << "{\"dtype\": " << int(d.dtype()) << ", \"lengths\": ";
  list([&](int64_t i) { return d.sequence_length(i); }, d.num_sequences());
  os << ", \"pointers\": ";
  int64_t p = 0;
  std::vector<int64_t> ptr;
  for (int64_t i = 0; i < d.num_sequences(); ++i) {
    ptr.push_back(p);
    p += d.sequence_length(i) * int64_t(token_dtype_size(d.dtype()));
  }
  list([&](int64_t i) { return ptr[size_t(i)]; }, d.num_sequences());
  os << ", \"document_indices\": ";
  list([&](int64_t i) { return d.document_indices()[size_t(i)]; }, int64_t(d.document_indices().size()));
  os << ", \"sequences\": [";
  for (int64_t s = 0; s < d.num_sequences(); ++s) {
    os << (s ? ", " : "");
    std::vector<int32_t> t = d.sequence(s);
    list([&](int64_t i) { return t[size_t(i)]; }, int64_t(t.size()));
  }
  os << "]}\n";
  return os.str();
}

TEST(IndexedDataset, BothDirectionsAgainstNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "python3-numpy missing";
  for (uint8_t code : {1, 3, 4, 5, 8}) {
    // numpy writes -> hytra reads.
    const std::string a = tmp("np_written" + std::to_string(code));
    const std::string spec = "{\"dtype\": " + std::to_string(code) +
                             ", \"documents\": [[[1, 2, 3], [4]], [], [[5, 6, 7, 8, 9, 10, 11]], [[120]]]}";
    std::FILE* f = popen((script() + " write " + a).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(spec.c_str(), f);
    ASSERT_EQ(pclose(f), 0);
    IndexedDataset da(a);
    EXPECT_EQ(as_json(da), run(script() + " read " + a)) << int(code);
    EXPECT_EQ(da.document_indices(), (std::vector<int64_t>{0, 2, 2, 3, 4}));
    // hytra writes -> numpy reads.
    const std::string b = tmp("hy_written" + std::to_string(code));
    IndexedDatasetWriter w(b, TokenDtype(code));
    w.add_document({1, 2, 3, 4}, {3, 1});
    w.add_document({});
    w.add_document({5, 6, 7, 8, 9, 10, 11});
    w.add_document({120});
    w.finalize();
    EXPECT_EQ(run(script() + " read " + b), as_json(IndexedDataset(b))) << int(code);
    EXPECT_EQ(bytes_of(b + ".idx"), bytes_of(a + ".idx")) << int(code);
    EXPECT_EQ(bytes_of(b + ".bin"), bytes_of(a + ".bin")) << int(code);
  }
}

}  // namespace
}  // namespace hytra
