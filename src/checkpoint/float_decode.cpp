#include "checkpoint/float_decode.h"

#include <cstring>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/error.h"

namespace hytra {

bool decodable_float(const std::string& dtype) { return dtype == "F32" || dtype == "BF16" || dtype == "F16"; }

int64_t float_bytes(const std::string& dtype) {
  HYTRA_ASSERT(decodable_float(dtype), "float_bytes: ", dtype);
  return dtype == "F32" ? 4 : 2;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // infinity or NaN (the payload kept)
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: mant x 2^-24, normalised
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400u) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool all_finite(const std::string& dtype, const unsigned char* src, int64_t count) {
  if (dtype == "F32") return all_finite_f32(src, count);
  HYTRA_ASSERT(dtype == "BF16" || dtype == "F16", "all_finite: ", dtype);
  const uint16_t exp_mask = dtype == "BF16" ? 0x7f80u : 0x7c00u;  // all exponent bits set: infinity or NaN
  for (int64_t i = 0; i < count; ++i)
    if ((uint16_t(src[2 * i] | (src[2 * i + 1] << 8)) & exp_mask) == exp_mask) return false;
  return true;
}

void decode_f32(const std::string& dtype, const unsigned char* src, int64_t count, float* dst) {
  if (dtype == "F32") {
    std::memcpy(dst, src, size_t(count) * 4);
    return;
  }
  HYTRA_ASSERT(dtype == "BF16" || dtype == "F16", "decode_f32: ", dtype);
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t bits = uint16_t(src[2 * i] | (src[2 * i + 1] << 8));
    dst[i] = dtype == "BF16" ? bf16_to_float(bf16{bits}) : half_to_float(bits);
  }
}

}  // namespace hytra
