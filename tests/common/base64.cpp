#include "common/base64.h"

#include <algorithm>
#include <cstdint>

namespace hytra::test {

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t j = 0; j < 3; ++j) v = v << 8 | (j < n ? uint8_t(bytes[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? k[v >> (18 - 6 * j) & 63] : '=';
  }
  return out;
}

}  // namespace hytra::test
