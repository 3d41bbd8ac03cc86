// Counter-based Philox4x32-10 RNG (Salmon et al., SC'11), identical on host and device.
// A draw is a pure function of (seed, stream, offset): the key is the 64-bit seed, the counter is
// (offset lo, offset hi, stream lo, stream hi). So element i of a tensor initialised with stream s
// gets the same numbers on CPU and GPU, in any thread order, and runs are reproducible.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define HYTRA_HD __host__ __device__ __forceinline__
#else
#define HYTRA_HD inline
#endif

namespace hytra {

struct Philox4 {
  uint32_t v[4];
};

HYTRA_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// Four 32-bit random words for counter block `offset` of `stream` under `seed`.
HYTRA_HD Philox4 philox4x32(uint64_t seed, uint64_t stream, uint64_t offset) {
  uint32_t c0 = uint32_t(offset), c1 = uint32_t(offset >> 32);
  uint32_t c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c0, hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in (0, 1]: 24 random bits, never 0 (safe for log).
HYTRA_HD float philox_uniform(uint32_t x) { return (float((x >> 8) + 1u)) * (1.0f / 16777216.0f); }

// Element i of a standard-normal sequence (Box-Muller on the pair of words 2*(i%2) of block i/2).
// Computed in double so CPU and GPU agree bit for bit on the float result.
HYTRA_HD float philox_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  Philox4 r = philox4x32(seed, stream, i / 2);
  int j = int(i % 2) * 2;
  double u1 = double(philox_uniform(r.v[j]));
  double u2 = double(philox_uniform(r.v[j + 1]));
  double radius = sqrt(-2.0 * log(u1));
  double angle = 6.283185307179586 * u2;
  return float(radius * cos(angle));
}

// Element i of a uniform [0, 1) sequence.
HYTRA_HD float philox_uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  Philox4 r = philox4x32(seed, stream, i / 4);
  return float(r.v[i % 4] >> 8) * (1.0f / 16777216.0f);
}

// Stable 64-bit stream id from a name (FNV-1a), e.g. a parameter's canonical key.
inline uint64_t stream_id(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) {
    h ^= uint8_t(*p);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace hytra
