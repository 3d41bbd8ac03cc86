// mHC Sinkhorn-Knopp and mixing coefficients, CPU reference (ops.h "mHC", docs/spec/mhc.md §2-§3).
// Sinkhorn on one n x n logit matrix L, as a list of steps, each dividing every row (or column)
// by a denominator d of that line's sum s:
//   main: M0 = exp(L - rowmax L); T x (row, col);           d = max(s, 1e-6)
//   dev:  M0 = softmax_row(L) + 1e-6; col, (T-1) x (row, col); d = s + 1e-6
// Backward keeps every iterate of the recomputed forward and walks the steps in reverse. For one
// line with output y = x / d: dx = (dy - <dy, y>) / d, or dy / d where main clamps (s < 1e-6, d
// constant). The first step: main dL = dM0 * M0 (the row-max shift cancels in the first row
// normalisation, whose sums are >= 1, so it carries no gradient); dev dL = p * (dM0 - <dM0, p>)
// per row, p = softmax_row(L).
// Coefficients per token (rms = ||x|| / sqrt(D) of its D = n*C stream elements, proj of P = n^2+2n):
//   r = 1 / (rms + 1e-6);  h = r * proj * a + bias  (a = alpha expanded per slice)
//   h_pre = sigmoid(h[0:n]) (+1e-6 dev); h_post = 2 sigmoid(h[n:2n]); h_res = sinkhorn(h[2n:]) (^T dev)
//   bwd: dh from the sigmoids and sinkhorn_bwd; dproj = dh * r * a; dr = sum_k dh_k proj_k a_k;
//        dalpha[g] += sum dh_k r proj_k; dbias += dh. (x's share of dr, -dr r^2 x / (D rms), is mhc_streams_bwd's.)
// Math in the proj dtype (float, double for fp64). The parameter gradients are deterministic:
// each block of kTokenBlock tokens (a constant, not the thread count) sums its tokens in order
// into its own partial, and the partials are summed in block order.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

using ops::MhcVariant;

constexpr int64_t kTokenBlock = 32;
constexpr double kSinkEps = 1e-6;
constexpr double kRmsEps = 1e-6;

// The normalisation steps of a Sinkhorn run: true = rows, false = columns.
std::vector<bool> sinkhorn_steps(int64_t iterations, MhcVariant variant) {
  std::vector<bool> steps;
  if (variant == MhcVariant::Dev) steps.push_back(false);
  const int64_t pairs = variant == MhcVariant::Dev ? iterations - 1 : iterations;
  for (int64_t t = 0; t < pairs; ++t) {
    steps.push_back(true);
    steps.push_back(false);
  }
  return steps;
}

// Element (line i, position k) of an n x n row-major matrix: line i is row i or column i.
inline int64_t at(bool rows, int64_t n, int64_t i, int64_t k) { return rows ? i * n + k : k * n + i; }

// Denominator of line i of m (n x n) for the variant.
template <class T>
T line_denominator(const T* m, bool rows, int64_t n, int64_t i, MhcVariant variant) {
  T s = 0;
  for (int64_t k = 0; k < n; ++k) s += m[at(rows, n, i, k)];
  return variant == MhcVariant::Main ? std::max(s, T(kSinkEps)) : s + T(kSinkEps);
}

// iterates[0] = M0 and iterates[s+1] = the output of step s; each (n*n). The last is M.
template <class T>
void sinkhorn_iterates(std::vector<std::vector<T>>& iterates, const T* logits, int64_t n,
                       const std::vector<bool>& steps, MhcVariant variant) {
  iterates.resize(steps.size() + 1);
  std::vector<T>& m0 = iterates[0];
  m0.resize(size_t(n * n));
  for (int64_t i = 0; i < n; ++i) {
    const T* l = logits + i * n;
    T* m = m0.data() + i * n;
    const T mx = *std::max_element(l, l + n);
    T s = 0;
    for (int64_t k = 0; k < n; ++k) s += m[k] = std::exp(l[k] - mx);
    if (variant == MhcVariant::Dev)
      for (int64_t k = 0; k < n; ++k) m[k] = m[k] / s + T(kSinkEps);
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    const std::vector<T>& x = iterates[s];
    std::vector<T>& y = iterates[s + 1];
    y.resize(size_t(n * n));
    for (int64_t i = 0; i < n; ++i) {
      const T d = line_denominator(x.data(), steps[s], n, i, variant);
      for (int64_t k = 0; k < n; ++k) y[at(steps[s], n, i, k)] = x[at(steps[s], n, i, k)] / d;
    }
  }
}

// dlogits (n*n) for one matrix, given dM (n*n); `iterates` is scratch.
template <class T>
void sinkhorn_backward_one(T* dlogits, const T* dM, const T* logits, int64_t n, const std::vector<bool>& steps,
                           MhcVariant variant, std::vector<std::vector<T>>& iterates) {
  sinkhorn_iterates(iterates, logits, n, steps, variant);
  std::vector<T> g(dM, dM + n * n);  // (n*n): gradient w.r.t. the current iterate
  for (size_t s = steps.size(); s-- > 0;) {
    const bool rows = steps[s];
    const std::vector<T>& x = iterates[s];
    const std::vector<T>& y = iterates[s + 1];
    for (int64_t i = 0; i < n; ++i) {
      T sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += x[at(rows, n, i, k)];
      const T d = line_denominator(x.data(), rows, n, i, variant);
      const bool through_sum = variant == MhcVariant::Dev || sum >= T(kSinkEps);
      T gy = 0;
      if (through_sum)
        for (int64_t k = 0; k < n; ++k) gy += g[at(rows, n, i, k)] * y[at(rows, n, i, k)];
      for (int64_t k = 0; k < n; ++k) g[at(rows, n, i, k)] = (g[at(rows, n, i, k)] - gy) / d;
    }
  }
  const std::vector<T>& m0 = iterates[0];
  std::vector<T> p(n);  // (n): the softmax of a logit row (dev)
  for (int64_t i = 0; i < n; ++i) {
    const T* gi = g.data() + i * n;
    if (variant == MhcVariant::Main) {
      for (int64_t k = 0; k < n; ++k) dlogits[i * n + k] = gi[k] * m0[i * n + k];
      continue;
    }
    const T* l = logits + i * n;
    const T mx = *std::max_element(l, l + n);
    T s = 0, gp = 0;
    for (int64_t k = 0; k < n; ++k) s += p[k] = std::exp(l[k] - mx);
    for (int64_t k = 0; k < n; ++k) gp += gi[k] * (p[k] /= s);
    for (int64_t k = 0; k < n; ++k) dlogits[i * n + k] = p[k] * (gi[k] - gp);
  }
}

template <class T>
void sinkhorn_fwd_impl(Tensor& M, const Tensor& logits, int64_t iterations, MhcVariant variant) {
  const int64_t R = logits.size(0), n = logits.size(1);
  const std::vector<bool> steps = sinkhorn_steps(iterations, variant);
  const T* l = logits.data<T>();  // (R, n, n)
  T* out = M.data<T>();           // (R, n, n)
  parallel_for(R, 64, [&](int64_t r0, int64_t r1) {
    std::vector<std::vector<T>> iterates;
    for (int64_t r = r0; r < r1; ++r) {
      sinkhorn_iterates(iterates, l + r * n * n, n, steps, variant);
      std::copy(iterates.back().begin(), iterates.back().end(), out + r * n * n);
    }
  });
}

template <class T>
void sinkhorn_bwd_impl(Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations,
                       MhcVariant variant) {
  const int64_t R = logits.size(0), n = logits.size(1);
  const std::vector<bool> steps = sinkhorn_steps(iterations, variant);
  const T* l = logits.data<T>();  // (R, n, n)
  const T* dm = dM.data<T>();     // (R, n, n)
  T* dl = dlogits.data<T>();      // (R, n, n)
  parallel_for(R, 64, [&](int64_t r0, int64_t r1) {
    std::vector<std::vector<T>> iterates;
    for (int64_t r = r0; r < r1; ++r)
      sinkhorn_backward_one(dl + r * n * n, dm + r * n * n, l + r * n * n, n, steps, variant, iterates);
  });
}

// The three gating factors alpha_pre, alpha_post, alpha_res (1 each), and their gradients.
using Alphas = std::array<const Tensor*, 3>;
using AlphaGrads = std::array<Tensor*, 3>;

// alpha expanded over the P outputs: alpha_pre x n, alpha_post x n, alpha_res x n^2.
template <class T>
std::vector<T> expand_alpha(const Alphas& alpha, int64_t n) {
  T a[3];
  for (int g = 0; g < 3; ++g) load(*alpha[g], 0, 1, a + g);
  std::vector<T> out(size_t(n * n + 2 * n), a[2]);
  for (int64_t k = 0; k < 2 * n; ++k) out[size_t(k)] = a[k / n];
  return out;
}

// h (P) of one token: r * proj * a + bias.
template <class T>
void token_logits(T* h, const T* proj, T r, const std::vector<T>& a, const std::vector<T>& bias) {
  for (size_t k = 0; k < a.size(); ++k) h[k] = r * proj[k] * a[k] + bias[k];
}

template <class T>
void coeffs_fwd_impl(Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& rms, const Tensor& proj,
                     const Alphas& alpha, const Tensor& bias, int64_t iterations, MhcVariant variant) {
  const int64_t N = proj.size(0), n = h_res.size(1), P = n * n + 2 * n;
  const std::vector<bool> steps = sinkhorn_steps(iterations, variant);
  const std::vector<T> a = expand_alpha<T>(alpha, n);
  std::vector<T> b(P);  // (P)
  load(bias, 0, P, b.data());
  const T* pj = proj.data<T>();  // (N, P)
  T* pre = h_pre.data<T>();      // (N, n)
  T* post = h_post.data<T>();    // (N, n)
  T* res = h_res.data<T>();      // (N, n, n)
  T* rs = r.data<T>();           // (N)
  const T* ms = rms.data<T>();   // (N)
  parallel_for(N, 16, [&](int64_t t0, int64_t t1) {
    std::vector<T> h(P);  // (P)
    std::vector<std::vector<T>> iterates;
    for (int64_t t = t0; t < t1; ++t) {
      const T rt = T(1) / (ms[t] + T(kRmsEps));
      rs[t] = rt;
      token_logits(h.data(), pj + t * P, rt, a, b);
      for (int64_t i = 0; i < n; ++i) {
        pre[t * n + i] = sigmoid(h[i]) + (variant == MhcVariant::Dev ? T(kSinkEps) : T(0));
        post[t * n + i] = 2 * sigmoid(h[n + i]);
      }
      sinkhorn_iterates(iterates, h.data() + 2 * n, n, steps, variant);
      const std::vector<T>& m = iterates.back();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          res[t * n * n + i * n + j] = variant == MhcVariant::Dev ? m[j * n + i] : m[i * n + j];
    }
  });
}

template <class T>
void coeffs_bwd_impl(Tensor& dproj, Tensor& dr_out, const AlphaGrads& dalpha, Tensor& dbias, const Tensor& dh_pre,
                     const Tensor& dh_post, const Tensor& dh_res, const Tensor& proj, const Alphas& alpha,
                     const Tensor& bias, const Tensor& r, int64_t iterations, MhcVariant variant) {
  const int64_t N = proj.size(0), n = dh_res.size(1), P = n * n + 2 * n, Q = P + 3;
  const int64_t nb = (N + kTokenBlock - 1) / kTokenBlock;
  const std::vector<bool> steps = sinkhorn_steps(iterations, variant);
  const std::vector<T> a = expand_alpha<T>(alpha, n);
  std::vector<T> b(P), part(size_t(nb * Q), T(0));  // (P); (nb, Q): dbias then dalpha per block
  load(bias, 0, P, b.data());
  const T* pj = proj.data<T>();  // (N, P)
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> h(P), dh(P), dp(P), dres(n * n), dm(n * n);  // (P), (P), (P), (n*n), (n*n)
    std::vector<std::vector<T>> iterates;
    for (int64_t blk = b0; blk < b1; ++blk) {
      T* pb = part.data() + blk * Q;
      for (int64_t t = blk * kTokenBlock; t < std::min(N, (blk + 1) * kTokenBlock); ++t) {
        T rt;
        load(r, t, 1, &rt);
        const T* pt = pj + t * P;
        token_logits(h.data(), pt, rt, a, b);
        load(dh_pre, t * n, n, dh.data());
        load(dh_post, t * n, n, dh.data() + n);
        load(dh_res, t * n * n, n * n, dres.data());
        for (int64_t i = 0; i < n; ++i) {
          const T sp = sigmoid(h[i]), sq = sigmoid(h[n + i]);
          dh[i] *= sp * (1 - sp);
          dh[n + i] *= 2 * sq * (1 - sq);
        }
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j)
            dm[i * n + j] = variant == MhcVariant::Dev ? dres[j * n + i] : dres[i * n + j];
        sinkhorn_backward_one(dh.data() + 2 * n, dm.data(), h.data() + 2 * n, n, steps, variant, iterates);
        T dr = 0;
        for (int64_t k = 0; k < P; ++k) {
          dp[k] = dh[k] * rt * a[k];
          dr += dh[k] * pt[k] * a[k];
          pb[k] += dh[k];
          pb[P + (k < 2 * n ? k / n : 2)] += dh[k] * rt * pt[k];
        }
        store(dproj, t * P, P, dp.data());
        store(dr_out, t, 1, &dr);
      }
    }
  });
  std::vector<T> total(Q, T(0)), cur(P);  // (Q), (P)
  for (int64_t blk = 0; blk < nb; ++blk)
    for (int64_t q = 0; q < Q; ++q) total[q] += part[size_t(blk * Q + q)];
  load(dbias, 0, P, cur.data());
  for (int64_t k = 0; k < P; ++k) cur[k] += total[k];
  store(dbias, 0, P, cur.data());
  for (int g = 0; g < 3; ++g) {
    load(*dalpha[g], 0, 1, cur.data());
    cur[0] += total[P + g];
    store(*dalpha[g], 0, 1, cur.data());
  }
}

}  // namespace

void sinkhorn_fwd(Exec&, Tensor& M, const Tensor& logits, int64_t iterations, ops::MhcVariant variant) {
  with_compute_type(logits.dtype(), [&](auto t) {
    sinkhorn_fwd_impl<decltype(t)>(M, logits, iterations, variant);
  });
}

void sinkhorn_bwd(Exec&, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations,
                  ops::MhcVariant variant) {
  with_compute_type(logits.dtype(), [&](auto t) {
    sinkhorn_bwd_impl<decltype(t)>(dlogits, dM, logits, iterations, variant);
  });
}

void mhc_coeffs_fwd(Exec&, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& rms,
                    const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post, const Tensor& alpha_res,
                    const Tensor& bias, int64_t iterations, ops::MhcVariant variant) {
  with_compute_type(proj.dtype(), [&](auto t) {
    coeffs_fwd_impl<decltype(t)>(h_pre, h_post, h_res, r, rms, proj, {&alpha_pre, &alpha_post, &alpha_res}, bias,
                                 iterations, variant);
  });
}

void mhc_coeffs_bwd(Exec&, Tensor& dproj, Tensor& dr, Tensor& dalpha_pre, Tensor& dalpha_post, Tensor& dalpha_res,
                    Tensor& dbias, const Tensor& dh_pre, const Tensor& dh_post, const Tensor& dh_res,
                    const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post, const Tensor& alpha_res,
                    const Tensor& bias, const Tensor& r, int64_t iterations, ops::MhcVariant variant) {
  with_compute_type(proj.dtype(), [&](auto t) {
    coeffs_bwd_impl<decltype(t)>(dproj, dr, {&dalpha_pre, &dalpha_post, &dalpha_res}, dbias, dh_pre, dh_post, dh_res,
                                 proj, {&alpha_pre, &alpha_post, &alpha_res}, bias, r, iterations, variant);
  });
}

}  // namespace hytra::cpu
