// Causal depthwise conv1d over time, CPU reference (ops.h "causal depthwise conv1d"; docs/spec/mamba_gdn.md
// §1 step 2, §2 step 2), in the compute type (float, double for fp64):
//   p[b,t,c] = bias[c] + sum_{j<K} w[c,j] * x[b, t-(K-1)+j, c]   (x = 0 before t = 0)
//   y = silu(p) or p;   g = dy * silu'(p) (or dy), silu'(p) = s * (1 + p * (1 - s)), s = sigmoid(p)
//   dx[b,s,c] = sum_{j<K} w[c,j] * g[b, s+(K-1)-j, c]   (g = 0 from t = T on)
//   dw[c,j] += sum_{b,t} g[b,t,c] * x[b, t-(K-1)+j, c];   dbias[c] += sum_{b,t} g[b,t,c]
// Rows (b,t) run in parallel. The backward first stores g for every row (it recomputes p), then
// dx row by row; the weight gradients are summed over fixed blocks of kRowBlock rows (a constant,
// not the thread count) into per-block partials, added in block order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kRowBlock = 32;

int64_t row_grain(int64_t C, int64_t K) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C * K, 1)); }

// p (C) = the pre-activation of row (b, t); row r of x starts at element r * ldx (row-pitched x),
// batch b's rows at rb = b * T.
template <class S>
void pre_activation(S* p, const Tensor& x, int64_t ldx, int64_t rb, int64_t t, const std::vector<S>& wv,
                    const std::vector<S>& bv, int64_t C, int64_t K, std::vector<S>& row) {
  for (int64_t c = 0; c < C; ++c) p[c] = bv[c];
  for (int64_t j = 0; j < K; ++j) {
    const int64_t ts = t - (K - 1) + j;
    if (ts < 0) continue;
    load(x, (rb + ts) * ldx, C, row.data());
    for (int64_t c = 0; c < C; ++c) p[c] += wv[c * K + j] * row[c];
  }
}

template <class S>
void conv1d_fwd_impl(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1);
  const int64_t ldx = x.row_pitch(), ldy = y.row_pitch();
  std::vector<S> wv(C * K), bv(C);  // (C,K), (C)
  load(w, 0, C * K, wv.data());
  load(bias, 0, C, bv.data());
  parallel_for(B * T, row_grain(C, K), [&](int64_t r0, int64_t r1) {
    std::vector<S> p(C), row(C);  // (C) each
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T;
      pre_activation(p.data(), x, ldx, r - t, t, wv, bv, C, K, row);
      if (silu)
        for (int64_t c = 0; c < C; ++c) p[c] *= sigmoid(p[c]);
      store(y, r * ldy, C, p.data());
    }
  });
}

template <class S>
void conv1d_bwd_impl(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& bias, bool silu) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1);
  const int64_t N = B * T, nb = (N + kRowBlock - 1) / kRowBlock;
  const int64_t ldx = x.row_pitch(), lddx = dx.row_pitch(), lddy = dy.row_pitch();
  std::vector<S> wv(C * K), bv(C);                                // (C,K), (C)
  std::vector<S> g(N * C), dw_part(nb * C * K), db_part(nb * C);  // (B*T,C), (nb,C,K), (nb,C)
  load(w, 0, C * K, wv.data());
  load(bias, 0, C, bv.data());
  // g for every row, and the weight-gradient partials of each block of rows.
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<S> p(C), row(C);  // (C) each
    for (int64_t blk = b0; blk < b1; ++blk) {
      S* dwp = dw_part.data() + blk * C * K;
      S* dbp = db_part.data() + blk * C;
      std::fill(dwp, dwp + C * K, S(0));
      std::fill(dbp, dbp + C, S(0));
      for (int64_t r = blk * kRowBlock; r < std::min(N, (blk + 1) * kRowBlock); ++r) {
        const int64_t t = r % T;
        S* gr = g.data() + r * C;
        load(dy, r * lddy, C, gr);
        if (silu) {
          pre_activation(p.data(), x, ldx, r - t, t, wv, bv, C, K, row);
          for (int64_t c = 0; c < C; ++c) {
            const S s = sigmoid(p[c]);
            gr[c] *= s * (S(1) + p[c] * (S(1) - s));
          }
        }
        for (int64_t c = 0; c < C; ++c) dbp[c] += gr[c];
        for (int64_t j = 0; j < K; ++j) {
          const int64_t ts = t - (K - 1) + j;
          if (ts < 0) continue;
          load(x, (r - t + ts) * ldx, C, row.data());
          for (int64_t c = 0; c < C; ++c) dwp[c * K + j] += gr[c] * row[c];
        }
      }
    }
  });
  parallel_for(N, row_grain(C, K), [&](int64_t r0, int64_t r1) {
    std::vector<S> d(C);  // (C)
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T;
      std::fill(d.begin(), d.end(), S(0));
      for (int64_t j = 0; j < K; ++j) {
        const int64_t tg = t + (K - 1) - j;
        if (tg >= T) continue;
        const S* gr = g.data() + (r + (K - 1) - j) * C;
        for (int64_t c = 0; c < C; ++c) d[c] += wv[c * K + j] * gr[c];
      }
      store(dx, r * lddx, C, d.data());
    }
  });
  // Block partials in block order, per weight element.
  parallel_for(C, 256, [&](int64_t c0, int64_t c1) {
    std::vector<S> dwr((c1 - c0) * K), dbr(c1 - c0);  // (c1-c0,K), (c1-c0)
    load(dw, c0 * K, (c1 - c0) * K, dwr.data());
    load(dbias, c0, c1 - c0, dbr.data());
    for (int64_t c = c0; c < c1; ++c) {
      S sb = 0;
      for (int64_t blk = 0; blk < nb; ++blk) sb += db_part[blk * C + c];
      dbr[c - c0] += sb;
      for (int64_t j = 0; j < K; ++j) {
        S sw = 0;
        for (int64_t blk = 0; blk < nb; ++blk) sw += dw_part[(blk * C + c) * K + j];
        dwr[(c - c0) * K + j] += sw;
      }
    }
    store(dw, c0 * K, (c1 - c0) * K, dwr.data());
    store(dbias, c0, c1 - c0, dbr.data());
  });
}

}  // namespace

void conv1d_fwd(Exec&, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  with_compute_type(x.dtype(), [&](auto t) { conv1d_fwd_impl<decltype(t)>(y, x, w, bias, silu); });
}

void conv1d_bwd(Exec&, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                const Tensor& bias, bool silu) {
  with_compute_type(x.dtype(), [&](auto t) { conv1d_bwd_impl<decltype(t)>(dx, dw, dbias, dy, x, w, bias, silu); });
}

}  // namespace hytra::cpu
