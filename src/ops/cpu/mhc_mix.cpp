// mHC stream mixing, CPU reference (ops.h "mHC hyper-connections", docs/spec/mhc.md §2 steps 5-6):
//   aggregate: u[t,:] = sum_i h_pre[t,i] X[t,i,:]
//              dh_pre[t,i] = <X[t,i,:], du[t,:]>;  dX[t,i,:] += h_pre[t,i] du[t,:] (where dX is defined)
//   combine:   Y[t,i,:] = sum_j h_res[t,i,j] X[t,j,:] + h_post[t,i] F[t,:]
//              dX[t,j,:] = sum_i h_res[t,i,j] dY[t,i,:];  dF[t,:] = sum_i h_post[t,i] dY[t,i,:]
//              dh_res[t,i,j] = <dY[t,i,:], X[t,j,:]>;  dh_post[t,i] = <dY[t,i,:], F[t,:]>
// Tokens run in parallel; each token's sums run in a fixed order (streams in index order, channels
// 0..C-1), in the compute type (float, double for fp64), rounded once on store. No value depends on
// another token, so the result is the same for any thread count.
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

// Tokens per parallel_for grain: about 16k elements of X each.
int64_t token_grain(int64_t n, int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n * C, 1)); }

template <class T>
void aggregate_fwd_impl(Tensor& u, const Tensor& X, const Tensor& h_pre) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  parallel_for(N, token_grain(n, C), [&](int64_t t0, int64_t t1) {
    std::vector<T> x(n * C), h(n), out(C);  // (n,C), (n), (C)
    for (int64_t t = t0; t < t1; ++t) {
      load(X, t * n * C, n * C, x.data());
      load(h_pre, t * n, n, h.data());
      std::fill(out.begin(), out.end(), T(0));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) out[c] += h[i] * x[i * C + c];
      store(u, t * C, C, out.data());
    }
  });
}

template <class T>
void aggregate_bwd_impl(Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  parallel_for(N, token_grain(n, C), [&](int64_t t0, int64_t t1) {
    std::vector<T> x(n * C), dx(n * C), g(C), h(n), dh(n);  // (n,C), (n,C), (C), (n), (n)
    const bool with_dx = dX.defined();
    for (int64_t t = t0; t < t1; ++t) {
      load(X, t * n * C, n * C, x.data());
      if (with_dx) load(dX, t * n * C, n * C, dx.data());
      load(du, t * C, C, g.data());
      load(h_pre, t * n, n, h.data());
      for (int64_t i = 0; i < n; ++i) {
        T dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += x[i * C + c] * g[c];
        dh[i] = dot;
      }
      store(dh_pre, t * n, n, dh.data());
      if (!with_dx) continue;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) dx[i * C + c] += h[i] * g[c];
      store(dX, t * n * C, n * C, dx.data());
    }
  });
}

template <class T>
void combine_fwd_impl(Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  parallel_for(N, token_grain(n, C), [&](int64_t t0, int64_t t1) {
    std::vector<T> x(n * C), f(C), hr(n * n), hp(n), y(n * C);  // (n,C), (C), (n,n), (n), (n,C)
    for (int64_t t = t0; t < t1; ++t) {
      load(X, t * n * C, n * C, x.data());
      load(F, t * C, C, f.data());
      load(h_res, t * n * n, n * n, hr.data());
      load(h_post, t * n, n, hp.data());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) {
          T acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += hr[i * n + j] * x[j * C + c];
          y[i * C + c] = acc + hp[i] * f[c];
        }
      store(Y, t * n * C, n * C, y.data());
    }
  });
}

template <class T>
void combine_bwd_impl(Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY, const Tensor& X,
                      const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  parallel_for(N, token_grain(n, C), [&](int64_t t0, int64_t t1) {
    std::vector<T> x(n * C), dy(n * C), f(C), hr(n * n), hp(n);  // (n,C), (n,C), (C), (n,n), (n)
    std::vector<T> dx(n * C), df(C), dhr(n * n), dhp(n);        // (n,C), (C), (n,n), (n)
    for (int64_t t = t0; t < t1; ++t) {
      load(X, t * n * C, n * C, x.data());
      load(dY, t * n * C, n * C, dy.data());
      load(F, t * C, C, f.data());
      load(h_res, t * n * n, n * n, hr.data());
      load(h_post, t * n, n, hp.data());
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += hp[i] * dy[i * C + c];
        df[c] = acc;
      }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < C; ++c) {
          T acc = 0;
          for (int64_t i = 0; i < n; ++i) acc += hr[i * n + j] * dy[i * C + c];
          dx[j * C + c] = acc;
        }
      for (int64_t i = 0; i < n; ++i) {
        T dot_f = 0;
        for (int64_t c = 0; c < C; ++c) dot_f += dy[i * C + c] * f[c];
        dhp[i] = dot_f;
        for (int64_t j = 0; j < n; ++j) {
          T dot = 0;
          for (int64_t c = 0; c < C; ++c) dot += dy[i * C + c] * x[j * C + c];
          dhr[i * n + j] = dot;
        }
      }
      store(dX, t * n * C, n * C, dx.data());
      store(dF, t * C, C, df.data());
      store(dh_res, t * n * n, n * n, dhr.data());
      store(dh_post, t * n, n, dhp.data());
    }
  });
}

}  // namespace

void mhc_aggregate_fwd(Exec&, Tensor& u, const Tensor& X, const Tensor& h_pre) {
  with_compute_type(X.dtype(), [&](auto t) { aggregate_fwd_impl<decltype(t)>(u, X, h_pre); });
}

void mhc_aggregate_bwd(Exec&, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre) {
  with_compute_type(X.dtype(), [&](auto t) { aggregate_bwd_impl<decltype(t)>(dX, dh_pre, du, X, h_pre); });
}

void mhc_combine_fwd(Exec&, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  with_compute_type(X.dtype(), [&](auto t) { combine_fwd_impl<decltype(t)>(Y, X, F, h_res, h_post); });
}

void mhc_combine_bwd(Exec&, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY, const Tensor& X,
                     const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  with_compute_type(X.dtype(), [&](auto t) {
    combine_bwd_impl<decltype(t)>(dX, dF, dh_res, dh_post, dY, X, F, h_res, h_post);
  });
}

}  // namespace hytra::cpu
