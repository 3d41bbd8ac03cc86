// What the CPU reference's rotary ops share (rope.cpp, decode.cpp): the fp32 frequencies of the rotated pairs and
// the channels of each pair (ops.def "rotary position embedding"; docs/spec/README.md decision 7).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace hytra::cpu {

// The R/2 pairs' frequencies in fp32 as Megatron: 1 / base^(2i/R); with factor > 1 YaRN's blend of that and it
// divided by factor over the ramp from pair low to pair high (ops.def mla_qkv_fwd).
inline std::vector<float> rope_frequencies(int64_t R, double base, double factor = 1.0, double low = 0.0,
                                           double high = 1.0) {
  std::vector<float> f(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) {
    const float extra = 1.0f / std::pow(float(base), float(2 * i) / float(R));
    if (factor == 1.0) {
      f[size_t(i)] = extra;
      continue;
    }
    const float inter = extra / float(factor);
    const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    f[size_t(i)] = inter * ramp + extra * (1.0f - ramp);
  }
  return f;
}

// The channels of pair i of R: (i, i + R/2) rotate-half, or (2i, 2i + 1) interleaved.
inline std::pair<int64_t, int64_t> rope_pair(int64_t i, int64_t R, bool interleaved) {
  return interleaved ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + R / 2};
}

// Position p's cos and sin of the angles float(p) * inv_freq[i] (fp32), taken in T and times scale (sin also
// times sign: -1 is the inverse rotation).
template <class T>
void rope_angles(int64_t p, const std::vector<float>& inv_freq, T scale, T sign, T* cos_out, T* sin_out) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = float(p) * inv_freq[i];
    cos_out[i] = scale * std::cos(T(angle));
    sin_out[i] = sign * scale * std::sin(T(angle));
  }
}

// The first R channels of row rotated pair by pair: a' = a cos - b sin, b' = b cos + a sin.
template <class T>
void rope_rotate(T* row, int64_t R, const T* c, const T* s, bool interleaved) {
  for (int64_t i = 0; i < R / 2; ++i) {
    const auto [ia, ib] = rope_pair(i, R, interleaved);
    const T a = row[ia], b = row[ib];
    row[ia] = a * c[i] - b * s[i];
    row[ib] = b * c[i] + a * s[i];
  }
}

}  // namespace hytra::cpu
