// Scalar helpers the CPU reference shares, templated on the compute type (fp32, or fp64 for
// gradient checks).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace hytra::cpu {

// a . b as eight interleaved partial sums (so the compiler vectorises it), the tail first, then the
// partial sums in lane order: a fixed order, so deterministic.
template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) part[l] += a[i + l] * b[i + l];
  T s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int l = 0; l < 8; ++l) s += part[l];
  return s;
}

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// log(1 + e^x) without overflow or cancellation; equal, to rounding, to torch's and mamba_ssm's
// thresholded form (x past 20 passed through).
template <class T>
T softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}

// The gated delta rule's q/k norm: u *= rsqrt(|u|^2 + eps) over n elements, eps kGdnNormEps (ops.def).
constexpr double kGdnNormEps = 1e-6;
template <class T>
void l2_normalize(T* u, int64_t n, T eps) {
  const T r = T(1) / std::sqrt(dot(u, u, n) + eps);
  for (int64_t i = 0; i < n; ++i) u[i] *= r;
}

}  // namespace hytra::cpu
