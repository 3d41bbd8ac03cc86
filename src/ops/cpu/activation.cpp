// Activations, CPU reference (ops.h "activations"; docs/spec/moe.md §5), in the compute type (float, double
// for fp64); each chunk or row is read before it is written, so pointwise outputs and dx may alias
// an input:
//   swiglu  x = [g | u] (N, 2F), gate FIRST: y = silu(g)*u, s = sigmoid(g), silu(g) = g*s;
//           dg = dy*u*s*(1 + g*(1-s)),  du = dy*silu(g)
//   gelu    y = x*Phi(x), Phi(x) = (1 + erf(x/sqrt2))/2;  dx = dy*(Phi(x) + x*exp(-x^2/2)/sqrt(2pi))
//   sqrelu  y = max(x,0)^2;  dx = dy*2*max(x,0)
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kChunk = 4096;  // elements per pointwise work item

// y[i] = f(x[i]) over any shape, in chunks of kChunk elements.
template <class T, class F>
void pointwise(Tensor& y, const Tensor& x, F f) {
  const int64_t n = x.numel(), nchunks = (n + kChunk - 1) / kChunk;
  parallel_for(nchunks, 4, [&](int64_t c0, int64_t c1) {
    std::vector<T> xv(kChunk);  // (kChunk)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t off = c * kChunk, len = std::min(kChunk, n - off);
      load(x, off, len, xv.data());
      for (int64_t i = 0; i < len; ++i) xv[i] = f(xv[i]);
      store(y, off, len, xv.data());
    }
  });
}

// dx[i] = dy[i] * f'(x[i]) over any shape, in chunks of kChunk elements.
template <class T, class F>
void pointwise_bwd(Tensor& dx, const Tensor& dy, const Tensor& x, F dfdx) {
  const int64_t n = x.numel(), nchunks = (n + kChunk - 1) / kChunk;
  parallel_for(nchunks, 4, [&](int64_t c0, int64_t c1) {
    std::vector<T> xv(kChunk), dyv(kChunk);  // (kChunk) each
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t off = c * kChunk, len = std::min(kChunk, n - off);
      load(x, off, len, xv.data());
      load(dy, off, len, dyv.data());
      for (int64_t i = 0; i < len; ++i) xv[i] = dyv[i] * dfdx(xv[i]);
      store(dx, off, len, xv.data());
    }
  });
}

template <class T>
void swiglu_fwd_impl(Tensor& y, const Tensor& x) {
  const int64_t N = x.size(0), F = x.size(1) / 2;
  parallel_for(N, std::max<int64_t>(1, 8192 / F), [&](int64_t n0, int64_t n1) {
    std::vector<T> xr(2 * F);  // (2F)
    for (int64_t n = n0; n < n1; ++n) {
      load(x, n * 2 * F, 2 * F, xr.data());
      for (int64_t f = 0; f < F; ++f) xr[f] = xr[f] * sigmoid(xr[f]) * xr[F + f];
      store(y, n * F, F, xr.data());
    }
  });
}

template <class T>
void swiglu_bwd_impl(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t N = x.size(0), F = x.size(1) / 2;
  parallel_for(N, std::max<int64_t>(1, 8192 / F), [&](int64_t n0, int64_t n1) {
    std::vector<T> xr(2 * F), dyr(F);  // (2F), (F)
    for (int64_t n = n0; n < n1; ++n) {
      load(x, n * 2 * F, 2 * F, xr.data());
      load(dy, n * F, F, dyr.data());
      for (int64_t f = 0; f < F; ++f) {
        const T g = xr[f], u = xr[F + f], s = sigmoid(g);
        xr[f] = dyr[f] * u * s * (T(1) + g * (T(1) - s));
        xr[F + f] = dyr[f] * g * s;
      }
      store(dx, n * 2 * F, 2 * F, xr.data());
    }
  });
}

template <class T>
T normal_cdf(T v) {
  return T(0.5) * (T(1) + std::erf(v / std::numbers::sqrt2_v<T>));
}

template <class T>
T gelu(T v) {
  return v * normal_cdf(v);
}

template <class T>
T gelu_grad(T v) {
  const T pdf = std::exp(T(-0.5) * v * v) * std::numbers::inv_sqrtpi_v<T> / std::numbers::sqrt2_v<T>;
  return normal_cdf(v) + v * pdf;
}

}  // namespace

void swiglu_fwd(Exec&, Tensor& y, const Tensor& x) {
  with_compute_type(x.dtype(), [&](auto t) { swiglu_fwd_impl<decltype(t)>(y, x); });
}

void swiglu_bwd(Exec&, Tensor& dx, const Tensor& dy, const Tensor& x) {
  with_compute_type(x.dtype(), [&](auto t) { swiglu_bwd_impl<decltype(t)>(dx, dy, x); });
}

void gelu_fwd(Exec&, Tensor& y, const Tensor& x) {
  with_compute_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    pointwise<T>(y, x, [](T v) { return gelu(v); });
  });
}

void gelu_bwd(Exec&, Tensor& dx, const Tensor& dy, const Tensor& x) {
  with_compute_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    pointwise_bwd<T>(dx, dy, x, [](T v) { return gelu_grad(v); });
  });
}

void sqrelu_fwd(Exec&, Tensor& y, const Tensor& x) {
  with_compute_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    pointwise<T>(y, x, [](T v) { return v > T(0) ? v * v : T(0); });
  });
}

void sqrelu_bwd(Exec&, Tensor& dx, const Tensor& dy, const Tensor& x) {
  with_compute_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    pointwise_bwd<T>(dx, dy, x, [](T v) { return v > T(0) ? T(2) * v : T(0); });
  });
}

}  // namespace hytra::cpu
