// The mHC mapping projection and the streams' gradient before the sub-layer, CPU reference (ops.def mhc_proj_fwd /
// mhc_streams_bwd): plain GEMMs in w's dtype (the streams converted to it first when they are stored in another),
// the per-token terms in that dtype, each dX element rounded once.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"
#include "ops/ops.h"

namespace hytra::cpu {
namespace {
// x in w's dtype (a copy when it differs).
Tensor in_dtype_of(Exec& ex, const Tensor& x, const Tensor& w) {
  if (x.dtype() == w.dtype()) return x;
  Tensor c = Tensor::empty(x.shape(), w.dtype(), x.device());
  ops::copy(ex, c, x);
  return c;
}

// rms[t] = ||x[t,:]|| / sqrt(D), the squares summed in order.
template <class T>
void rms_impl(Tensor& rms, const Tensor& x) {
  const int64_t N = x.size(0), D = x.size(1);
  T* out = rms.data<T>();  // (N)
  parallel_for(N, 16, [&](int64_t t0, int64_t t1) {
    std::vector<T> xs;  // (D)
    for (int64_t t = t0; t < t1; ++t) {
      const T* xr = load_view<T>(x, t * D, D, xs);
      T ss = 0;
      for (int64_t c = 0; c < D; ++c) ss += xr[c] * xr[c];
      out[t] = std::sqrt(ss) / std::sqrt(T(D));
    }
  });
}

// dX[t,i,c] += h_pre[t,i] du[t,c] + proj_dx[t, iC + c] + s[t] X[t,i,c], s = -dr r^2 / (D rms) (0 where rms = 0).
template <class T>
void streams_dx_impl(Tensor& dX, const Tensor& proj_dx, const Tensor& dr, const Tensor& r, const Tensor& rms,
                     const Tensor& du, const Tensor& h_pre, const Tensor& X) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2), D = n * C;
  const T* pd = proj_dx.data<T>();  // (N, D)
  const T *drs = dr.data<T>(), *rs = r.data<T>(), *ms = rms.data<T>(), *hp = h_pre.data<T>();
  parallel_for(N, 4, [&](int64_t t0, int64_t t1) {
    std::vector<T> x(D), dx(D), g(C);  // (D), (D), (C)
    for (int64_t t = t0; t < t1; ++t) {
      load(X, t * D, D, x.data());
      load(dX, t * D, D, dx.data());
      load(du, t * C, C, g.data());
      const T s = ms[t] > 0 ? -drs[t] * rs[t] * rs[t] / (T(D) * ms[t]) : T(0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t d = i * C + c;
          dx[d] += hp[t * n + i] * g[c] + pd[t * D + d] + s * x[d];
        }
      store(dX, t * D, D, dx.data());
    }
  });
}
}  // namespace

void mhc_proj_fwd(Exec& ex, Tensor& proj, Tensor& rms, const Tensor& x, const Tensor& w) {
  ops::gemm(ex, proj, in_dtype_of(ex, x, w), w, false, true, 1.0f, 0.0f);
  with_compute_type(w.dtype(), [&](auto t) { rms_impl<decltype(t)>(rms, x); });
}

void mhc_streams_bwd(Exec& ex, Tensor& dX, Tensor& dw, const Tensor& dproj, const Tensor& dr, const Tensor& r,
                     const Tensor& rms, const Tensor& du, const Tensor& h_pre, const Tensor& X, const Tensor& w) {
  const int64_t N = X.size(0), D = X.size(1) * X.size(2);
  const Tensor x = X.view({N, D});
  ops::gemm(ex, dw, dproj, in_dtype_of(ex, x, w), true, false, 1.0f, 1.0f);
  Tensor proj_dx = Tensor::empty({N, D}, w.dtype(), X.device());  // (N, D): dproj w
  ops::gemm(ex, proj_dx, dproj, w, false, false, 1.0f, 0.0f);
  with_compute_type(w.dtype(), [&](auto t) { streams_dx_impl<decltype(t)>(dX, proj_dx, dr, r, rms, du, h_pre, X); });
}

}  // namespace hytra::cpu
