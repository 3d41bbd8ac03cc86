// Element types. fp64 exists for CPU gradient checks only; bf16 is stored as raw uint16 bits
// (round-to-nearest-even on conversion), so host code never needs CUDA headers.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace hytra {

enum class DType : uint8_t { F32, BF16, I32, I64, F64 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::F64: return "fp64";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F64; }

// bf16 <-> fp32 bit conversions (round to nearest even; NaN stays NaN).
struct bf16 {
  uint16_t bits;
};
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}
inline float bf16_to_float(bf16 b) {
  uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace hytra
