// Scalar helpers the CPU reference shares, templated on the compute type (fp32, or fp64 for
// gradient checks).
#pragma once
#include <algorithm>
#include <cmath>

namespace hytra::cpu {

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

}  // namespace hytra::cpu
