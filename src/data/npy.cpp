#include "data/npy.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hytra {
namespace {

int item_size(const std::string& descr) {
  if (descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<i8") return 8;
  return 0;
}

}  // namespace

void write_npy(const std::string& path, const NpyArray& a) {
  const int item = item_size(a.descr);
  HYTRA_ASSERT(item > 0 && (a.shape.size() == 1 || a.shape.size() == 2), "npy array ", a.descr);
  std::string shape = "(" + std::to_string(a.shape[0]) + (a.shape.size() == 1 ? "," : ", " + std::to_string(a.shape[1])) + ")";
  std::string header = "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += char(1);
  bytes += char(0);
  bytes += char(header.size() & 0xff);
  bytes += char(header.size() >> 8);
  bytes += header;
  for (int64_t v : a.values) {
    char b[8];
    if (item == 4) {
      const uint32_t x = uint32_t(v);
      std::memcpy(b, &x, 4);
    } else {
      std::memcpy(b, &v, 8);
    }
    bytes.append(b, size_t(item));
  }
  write_file_atomic(path, bytes);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), path, ": cannot open");
  const std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  HYTRA_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0 && bytes[6] == 1, path,
              ": not a version 1.0 .npy file");
  const size_t hlen = size_t(uint8_t(bytes[8])) | size_t(uint8_t(bytes[9])) << 8;
  HYTRA_CHECK(bytes.size() >= 10 + hlen, path, ": truncated header");
  const std::string header = bytes.substr(10, hlen);
  static const std::regex re(R"(\{'descr': '([<|][iu][48])', 'fortran_order': False, 'shape': \((\d+),\s*(\d*)\),? ?\}\s*)");
  std::smatch m;
  HYTRA_CHECK(std::regex_match(header, m, re), path, ": unsupported .npy header ", header);
  NpyArray a;
  a.descr = m[1].str();
  const int item = item_size(a.descr);
  HYTRA_CHECK(item > 0, path, ": unsupported dtype ", a.descr);
  const size_t data_bytes = bytes.size() - 10 - hlen;
  size_t n = 1, total = 0;
  bool overflow = false;  // a shape no file could hold
  for (int k : {2, 3}) {
    const std::string d = m[k].str();
    if (k == 3 && d.empty()) break;
    const size_t v = d.size() <= 18 ? size_t(std::stoll(d)) : SIZE_MAX;
    overflow |= __builtin_mul_overflow(n, v, &n);
    a.shape.push_back(int64_t(std::min<size_t>(v, INT64_MAX)));
  }
  overflow |= __builtin_mul_overflow(n, size_t(item), &total);
  HYTRA_CHECK(!overflow && data_bytes == total, path, ": the header's shape (", m[2].str(),
              m[3].str().empty() ? "" : ", " + m[3].str(), ") of ", item, "-byte elements does not match the ",
              data_bytes, " bytes of data after it");
  a.values.resize(n);
  const char* p = bytes.data() + 10 + hlen;
  for (size_t i = 0; i < n; ++i) {
    if (a.descr == "<i4") {
      int32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      a.values[i] = x;
    } else if (a.descr == "<u4") {
      uint32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      a.values[i] = x;
    } else {
      std::memcpy(&a.values[i], p + 8 * i, 8);
    }
  }
  return a;
}

}  // namespace hytra
