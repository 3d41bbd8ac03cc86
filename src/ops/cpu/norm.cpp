// RMSNorm and LayerNorm over the rows of x (N, C), CPU reference (ops.h "norms"):
//   rmsnorm:   r = 1/sqrt(mean(x^2) + eps), y = x*r*w;
//              g = dy*w, dx = r*(g - x*r^2*mean(g*x)), dw += sum_n dy*x*r
//   add_rmsnorm_fwd: x = round(a + b) stored to sum, then rmsnorm;  rmsnorm_bwd_add: dx += dres
//   layernorm: mu = mean(x), r = 1/sqrt(mean((x-mu)^2) + eps), xh = (x-mu)*r, y = xh*w + b;
//              g = dy*w, dx = r*(g - mean(g) - xh*mean(g*xh)), dw += sum_n dy*xh, db += sum_n dy
// Rows run in parallel in the compute type (float, double for fp64). Weight gradients stay
// deterministic: each block of kRowBlock rows (a constant, not the thread count) sums its rows in
// order into its own partial, and the partials are summed in block order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kRowBlock = 32;

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }
int64_t num_blocks(int64_t N) { return (N + kRowBlock - 1) / kRowBlock; }

// g (C) += sum over blocks b, in order, of part[b] (nb, C).
template <class T>
void add_block_partials(Tensor& g, const std::vector<T>& part, int64_t nb, int64_t C) {
  parallel_for(C, 1024, [&](int64_t c0, int64_t c1) {
    std::vector<T> total(c1 - c0, T(0)), cur(c1 - c0);  // (c1-c0)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t c = c0; c < c1; ++c) total[size_t(c - c0)] += part[size_t(b * C + c)];
    load(g, c0, c1 - c0, cur.data());
    for (int64_t c = c0; c < c1; ++c) cur[size_t(c - c0)] += total[size_t(c - c0)];
    store(g, c0, c1 - c0, cur.data());
  });
}

// With `sum` defined, row n of x is first a[n] + b[n], stored to sum (rounded to its dtype) and
// read back, so the norm sees exactly what add + rmsnorm_fwd would.
template <class T>
void rmsnorm_fwd_impl(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, T eps, Tensor* sum = nullptr,
                      const Tensor* b = nullptr) {
  const int64_t N = x.size(0), C = x.size(1);
  std::vector<T> wv(C);  // (C)
  load(w, 0, C, wv.data());
  T* rs = rstd.data<T>();  // (N)
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    std::vector<T> row(C), other(sum ? C : 0);  // (C) each
    for (int64_t n = n0; n < n1; ++n) {
      load(x, n * C, C, row.data());
      if (sum) {
        load(*b, n * C, C, other.data());
        for (int64_t c = 0; c < C; ++c) row[c] += other[c];
        store(*sum, n * C, C, row.data());
        load(*sum, n * C, C, row.data());
      }
      T ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += row[c] * row[c];
      T r = T(1) / std::sqrt(ss / T(C) + eps);
      for (int64_t c = 0; c < C; ++c) row[c] = row[c] * r * wv[c];
      rs[n] = r;
      store(y, n * C, C, row.data());
    }
  });
}

// With dres defined, dx = dres + the norm's input gradient, rounded once.
template <class T>
void rmsnorm_bwd_impl(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd, const Tensor* dres = nullptr) {
  const int64_t N = x.size(0), C = x.size(1), nb = num_blocks(N);
  std::vector<T> wv(C), dw_part(nb * C, T(0));  // (C), (nb, C)
  load(w, 0, C, wv.data());
  const T* rs = rstd.data<T>();  // (N)
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> xr(C), dyr(C), g(C), res(dres ? C : 0);  // (C) each
    for (int64_t b = b0; b < b1; ++b) {
      T* dwp = dw_part.data() + b * C;
      for (int64_t n = b * kRowBlock; n < std::min(N, (b + 1) * kRowBlock); ++n) {
        load(x, n * C, C, xr.data());
        load(dy, n * C, C, dyr.data());
        if (dres) load(*dres, n * C, C, res.data());
        const T r = rs[n];
        T gx = 0;
        for (int64_t c = 0; c < C; ++c) {
          g[c] = dyr[c] * wv[c];
          gx += g[c] * xr[c];
        }
        const T k = r * r * gx / T(C);
        for (int64_t c = 0; c < C; ++c) {
          dwp[c] += dyr[c] * xr[c] * r;
          g[c] = r * (g[c] - xr[c] * k);
          if (dres) g[c] += res[c];
        }
        store(dx, n * C, C, g.data());
      }
    }
  });
  add_block_partials(dw, dw_part, nb, C);
}

template <class T>
void layernorm_fwd_impl(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                        const Tensor& b, T eps) {
  const int64_t N = x.size(0), C = x.size(1);
  std::vector<T> wv(C), bv(C, T(0));  // (C), (C)
  load(w, 0, C, wv.data());
  if (b.defined()) load(b, 0, C, bv.data());
  T* mu_out = mean.data<T>();  // (N)
  T* rs = rstd.data<T>();      // (N)
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    std::vector<T> row(C);  // (C)
    for (int64_t n = n0; n < n1; ++n) {
      load(x, n * C, C, row.data());
      T s = 0;
      for (int64_t c = 0; c < C; ++c) s += row[c];
      const T mu = s / T(C);
      T var = 0;
      for (int64_t c = 0; c < C; ++c) var += (row[c] - mu) * (row[c] - mu);
      const T r = T(1) / std::sqrt(var / T(C) + eps);
      for (int64_t c = 0; c < C; ++c) row[c] = (row[c] - mu) * r * wv[c] + bv[c];
      mu_out[n] = mu;
      rs[n] = r;
      store(y, n * C, C, row.data());
    }
  });
}

template <class T>
void layernorm_bwd_impl(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd) {
  const int64_t N = x.size(0), C = x.size(1), nb = num_blocks(N);
  std::vector<T> wv(C), dw_part(nb * C, T(0));  // (C), (nb, C)
  std::vector<T> db_part(db.defined() ? nb * C : 0, T(0));  // (nb, C)
  load(w, 0, C, wv.data());
  const T* mu = mean.data<T>();  // (N)
  const T* rs = rstd.data<T>();  // (N)
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> xh(C), dyr(C), g(C);  // (C) each
    for (int64_t b = b0; b < b1; ++b) {
      T* dwp = dw_part.data() + b * C;
      T* dbp = db.defined() ? db_part.data() + b * C : nullptr;
      for (int64_t n = b * kRowBlock; n < std::min(N, (b + 1) * kRowBlock); ++n) {
        load(x, n * C, C, xh.data());
        load(dy, n * C, C, dyr.data());
        const T r = rs[n];
        T g_sum = 0, gxh_sum = 0;
        for (int64_t c = 0; c < C; ++c) {
          xh[c] = (xh[c] - mu[n]) * r;
          g[c] = dyr[c] * wv[c];
          g_sum += g[c];
          gxh_sum += g[c] * xh[c];
        }
        const T g_mean = g_sum / T(C), gxh_mean = gxh_sum / T(C);
        for (int64_t c = 0; c < C; ++c) {
          dwp[c] += dyr[c] * xh[c];
          if (dbp) dbp[c] += dyr[c];
          g[c] = r * (g[c] - g_mean - xh[c] * gxh_mean);
        }
        store(dx, n * C, C, g.data());
      }
    }
  });
  add_block_partials(dw, dw_part, nb, C);
  if (db.defined()) add_block_partials(db, db_part, nb, C);
}

}  // namespace

void rmsnorm_fwd(Exec&, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  with_compute_type(x.dtype(), [&](auto t) { rmsnorm_fwd_impl<decltype(t)>(y, rstd, x, w, decltype(t)(eps)); });
}

void rmsnorm_bwd(Exec&, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd) {
  with_compute_type(x.dtype(), [&](auto t) { rmsnorm_bwd_impl<decltype(t)>(dx, dw, dy, x, w, rstd); });
}

void add_rmsnorm_fwd(Exec&, Tensor& sum, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                     double eps) {
  with_compute_type(a.dtype(),
                    [&](auto t) { rmsnorm_fwd_impl<decltype(t)>(y, rstd, a, w, decltype(t)(eps), &sum, &b); });
}

void rmsnorm_bwd_add(Exec&, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dres) {
  with_compute_type(x.dtype(), [&](auto t) { rmsnorm_bwd_impl<decltype(t)>(dx, dw, dy, x, w, rstd, &dres); });
}

void layernorm_fwd(Exec&, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                   const Tensor& b, double eps) {
  with_compute_type(x.dtype(),
                    [&](auto t) { layernorm_fwd_impl<decltype(t)>(y, mean, rstd, x, w, b, decltype(t)(eps)); });
}

void layernorm_bwd(Exec&, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                   const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  with_compute_type(x.dtype(),
                    [&](auto t) { layernorm_bwd_impl<decltype(t)>(dx, dw, db, dy, x, w, mean, rstd); });
}

}  // namespace hytra::cpu
