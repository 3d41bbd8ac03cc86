// Gated RMSNorm over groups of group_size channels, CPU reference (ops.h "norms"; docs/spec/mamba_gdn.md
// §1 step 5 and §2 step 6), in the compute type (float, double for fp64). Per row n and group:
//   sz = silu(z), sz' = s * (1 + z * (1 - s)), s = sigmoid(z); w[c] is w[c] or w[c % group_size]
//   norm_before_gate = false: u = x*sz, r = 1/sqrt(mean(u^2) + eps), y = u*r*w
//     gu = dy*w, du = r*(gu - u*r^2*mean(gu*u)), dx = du*sz, dz = du*x*sz'
//   norm_before_gate = true:  r = 1/sqrt(mean(x^2) + eps), y = x*r*w*sz
//     g = dy*w*sz, dx = r*(g - x*r^2*mean(g*x)), dz = dy*x*r*w*sz'
//   both: dw += sum_n dy*x*r*sz (summed over the groups too when w is (group_size))
// Rows run in parallel. The weight gradient is summed per block of kRowBlock rows (a constant, not
// the thread count) into a (C) partial; the partials are added in block order, then (w of
// group_size) the groups in group order.
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

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }

// w (C) or (group_size), expanded to (C).
template <class S>
std::vector<S> load_weight(const Tensor& w, int64_t C) {
  const int64_t M = w.numel();
  std::vector<S> wv(C);  // (C)
  for (int64_t g = 0; g < C / M; ++g) load(w, 0, M, wv.data() + g * M);
  return wv;
}

template <class S>
void gated_rmsnorm_fwd_impl(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w, int64_t gs,
                            S eps, bool norm_before_gate) {
  const int64_t N = x.size(0), C = x.size(1), G = C / gs, ldz = z.row_pitch();
  const std::vector<S> wv = load_weight<S>(w, C);  // (C)
  S* rs = rstd.data<S>();                          // (N,G)
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    std::vector<S> xr(C), zr(C);  // (C) each
    for (int64_t n = n0; n < n1; ++n) {
      load(x, n * C, C, xr.data());
      load(z, n * ldz, C, zr.data());
      for (int64_t c = 0; c < C; ++c) {
        const S sz = zr[c] * sigmoid(zr[c]);
        if (norm_before_gate)
          zr[c] = sz;
        else
          xr[c] *= sz;  // u
      }
      for (int64_t g = 0; g < G; ++g) {
        S ss = 0;
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c) ss += xr[c] * xr[c];
        const S r = S(1) / std::sqrt(ss / S(gs) + eps);
        rs[n * G + g] = r;
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c)
          xr[c] = norm_before_gate ? xr[c] * r * wv[c] * zr[c] : xr[c] * r * wv[c];
      }
      store(y, n * C, C, xr.data());
    }
  });
}

template <class S>
void gated_rmsnorm_bwd_impl(Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z,
                            const Tensor& w, const Tensor& rstd, int64_t gs, bool norm_before_gate) {
  const int64_t N = x.size(0), C = x.size(1), G = C / gs, nb = (N + kRowBlock - 1) / kRowBlock;
  const int64_t ldz = z.row_pitch(), lddz = dz.row_pitch();
  const std::vector<S> wv = load_weight<S>(w, C);  // (C)
  std::vector<S> dw_part(nb * C, S(0));            // (nb,C)
  const S* rs = rstd.data<S>();                    // (N,G)
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<S> xr(C), zr(C), dyr(C), sz(C), dsz(C), gr(C);  // (C) each
    for (int64_t blk = b0; blk < b1; ++blk) {
      S* dwp = dw_part.data() + blk * C;
      for (int64_t n = blk * kRowBlock; n < std::min(N, (blk + 1) * kRowBlock); ++n) {
        load(x, n * C, C, xr.data());
        load(z, n * ldz, C, zr.data());
        load(dy, n * C, C, dyr.data());
        for (int64_t c = 0; c < C; ++c) {
          const S s = sigmoid(zr[c]);
          sz[c] = zr[c] * s;
          dsz[c] = s * (S(1) + zr[c] * (S(1) - s));
        }
        for (int64_t g = 0; g < G; ++g) {
          const S r = rs[n * G + g];
          const int64_t c0 = g * gs, c1 = (g + 1) * gs;
          S dot = 0;  // sum(gu*u), or sum(g*x) before the gate
          for (int64_t c = c0; c < c1; ++c) {
            dwp[c] += dyr[c] * xr[c] * r * sz[c];
            if (norm_before_gate) {
              gr[c] = dyr[c] * wv[c] * sz[c];
              dot += gr[c] * xr[c];
            } else {
              gr[c] = dyr[c] * wv[c];
              dot += gr[c] * xr[c] * sz[c];
            }
          }
          const S k = r * r * dot / S(gs);
          for (int64_t c = c0; c < c1; ++c) {
            if (norm_before_gate) {
              zr[c] = dyr[c] * xr[c] * r * wv[c] * dsz[c];
              xr[c] = r * (gr[c] - xr[c] * k);
            } else {
              const S u = xr[c] * sz[c];
              const S du = r * (gr[c] - u * k);
              zr[c] = du * xr[c] * dsz[c];
              xr[c] = du * sz[c];
            }
          }
        }
        store(dx, n * C, C, xr.data());
        store(dz, n * lddz, C, zr.data());
      }
    }
  });
  const int64_t M = w.numel();
  std::vector<S> total(M, S(0)), cur(M);  // (M) each
  for (int64_t g = 0; g < C / M; ++g)
    for (int64_t k = 0; k < M; ++k) {
      S s = 0;
      for (int64_t blk = 0; blk < nb; ++blk) s += dw_part[blk * C + g * M + k];
      total[k] += s;
    }
  load(dw, 0, M, cur.data());
  for (int64_t k = 0; k < M; ++k) cur[k] += total[k];
  store(dw, 0, M, cur.data());
}

}  // namespace

void gated_rmsnorm_fwd(Exec&, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w,
                       int64_t group_size, double eps, bool norm_before_gate) {
  with_compute_type(x.dtype(), [&](auto t) {
    gated_rmsnorm_fwd_impl<decltype(t)>(y, rstd, x, z, w, group_size, decltype(t)(eps), norm_before_gate);
  });
}

void gated_rmsnorm_bwd(Exec&, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z,
                       const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate) {
  with_compute_type(x.dtype(), [&](auto t) {
    gated_rmsnorm_bwd_impl<decltype(t)>(dx, dz, dw, dy, x, z, w, rstd, group_size, norm_before_gate);
  });
}

}  // namespace hytra::cpu
