// MoE router ops, CPU reference (ops.h "mixture-of-experts"; docs/spec/moe.md §1-§2; Megatron-Core
// TopKRouter: moe_utils.py topk_routing_with_score_function, group_limited_topk,
// compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func, z_loss_func).
// All math in the compute type T: float for fp32 logits, double for fp64 (gradchecks).
//   moe_router_fwd  per token: selection values v (raw logits | softmax | sigmoid + bias); with
//                   groups, group score = sum of its top (k / group_topk) v, the group_topk best
//                   groups kept, the others' v set to -inf (Megatron's masked_fill); top = the k
//                   best v, best first; probs = softmax of the selected logits | selected softmax |
//                   selected unbiased sigmoid / (sum + 1e-20) if k > 1; then * scaling.
//   moe_router_bwd  the selection held fixed, with g = scaling * dprobs:
//                   softmax over the selected z:  dz_i = p_i (g_i - sum_j p_j g_j)
//                   full softmax s, gathered:     dx_e = s_e (g_e - sum_i s_top_i g_i), g_e = 0 off top
//                   sigmoid, k > 1:               dx_i = (g_i - sum_j q_j g_j) / Z * s_i (1 - s_i),
//                                                 q = s / Z, Z = sum s + 1e-20;  k = 1: dx = g s (1 - s)
//   moe_aux_loss    scores softmax | sigmoid / (sum + 1e-20); counts[q,e] = tokens of sequence q
//                   with e among their top k; loss = c sum_q sum_e P[q,e] tokens[q,e],
//                   P[q,e] = sum_{t in q} scores[t,e], c = coeff E / (k T^2 num_seqs);
//                   dlogits += grad_scale * (softmax or normalised-sigmoid backward of g[t,e] =
//                   c tokens[q(t),e]). The counts' top k is taken on the logits: both score maps are
//                   strictly increasing in the logit, so this is Megatron's top k of the scores,
//                   without ties that only fp rounding of the scores would create.
//   moe_z_loss      lse_t = logsumexp(x_t); loss = coeff / N * sum_t lse_t^2;
//                   dlogits += grad_scale * coeff * 2 lse_t / N * softmax(x_t).
// Order: a ranks before b when v_a > v_b, or v_a == v_b and a < b (ties to the lower expert or
// group index; torch.topk leaves ties unspecified). Logits must be finite (-inf marks masked
// experts). Rows run in parallel; sums over tokens run in token order, so results do not depend
// on the thread count. top rows must hold distinct expert ids (as moe_router_fwd writes them).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

using ops::RouterScore;

int64_t row_grain(int64_t E) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(E, 1)); }

// s (n) = softmax(x (n)).
template <class T>
void softmax(const T* x, int64_t n, T* s) {
  const T m = *std::max_element(x, x + n);
  T z = 0;
  for (int64_t i = 0; i < n; ++i) z += (s[i] = std::exp(x[i] - m));
  for (int64_t i = 0; i < n; ++i) s[i] /= z;
}

// idx := the k best of the candidate indices in idx, best first (see the order above).
template <class T>
void top_k(std::vector<int64_t>& idx, int64_t k, const T* v) {
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [v](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
}

// v (E) := -inf outside the group_topk groups of highest score (sum of their top m values).
template <class T>
void mask_groups(T* v, int64_t E, int64_t num_groups, int64_t group_topk, int64_t m) {
  const int64_t per = E / num_groups;
  std::vector<T> group_score(num_groups);  // (G)
  std::vector<int64_t> idx;
  for (int64_t g = 0; g < num_groups; ++g) {
    idx.resize(per);
    std::iota(idx.begin(), idx.end(), g * per);
    top_k(idx, m, v);
    T sum = 0;
    for (int64_t e : idx) sum += v[e];
    group_score[g] = sum;
  }
  idx.resize(num_groups);
  std::iota(idx.begin(), idx.end(), 0);
  top_k(idx, group_topk, group_score.data());
  std::vector<char> keep(num_groups, 0);  // (G)
  for (int64_t g : idx) keep[g] = 1;
  for (int64_t e = 0; e < E; ++e)
    if (!keep[e / per]) v[e] = -std::numeric_limits<T>::infinity();
}

template <class T>
void router_fwd_impl(Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k,
                     RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk, T scaling) {
  const int64_t N = logits.size(0), E = logits.size(1);
  std::vector<T> bias(E, T(0));  // (E)
  if (expert_bias.defined()) load(expert_bias, 0, E, bias.data());
  T* p_out = probs.data<T>();              // (N,K)
  int32_t* top_out = top.data<int32_t>();  // (N,K)
  parallel_for(N, row_grain(E), [&](int64_t n0, int64_t n1) {
    std::vector<T> x(E), s(E), v(E), p(k);  // (E) x3, (K)
    std::vector<int64_t> idx;
    for (int64_t n = n0; n < n1; ++n) {
      load(logits, n * E, E, x.data());
      if (score == RouterScore::Sigmoid) {
        for (int64_t e = 0; e < E; ++e) v[e] = (s[e] = sigmoid(x[e])) + bias[e];
      } else if (pre_softmax) {
        softmax(x.data(), E, s.data());
        v = s;
      } else {
        v = x;
      }
      if (num_groups > 0) mask_groups(v.data(), E, num_groups, group_topk, k / group_topk);
      idx.resize(E);
      std::iota(idx.begin(), idx.end(), 0);
      top_k(idx, k, v.data());
      if (score == RouterScore::Softmax && !pre_softmax) {
        for (int64_t i = 0; i < k; ++i) p[i] = x[idx[i]];
        softmax(p.data(), k, p.data());
      } else {
        T sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += (p[i] = s[idx[i]]);
        if (score == RouterScore::Sigmoid && k > 1)
          for (T& pi : p) pi /= sum + T(1e-20);
      }
      for (int64_t i = 0; i < k; ++i) {
        p_out[n * k + i] = p[i] * scaling;
        top_out[n * k + i] = int32_t(idx[i]);
      }
    }
  });
}

template <class T>
void router_bwd_impl(Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top,
                     RouterScore score, bool pre_softmax, T scaling) {
  const int64_t N = logits.size(0), E = logits.size(1), K = top.size(1);
  const int32_t* tp = top.data<int32_t>();  // (N,K)
  parallel_for(N, row_grain(E), [&](int64_t n0, int64_t n1) {
    std::vector<T> x(E), dx(E), s(E), g(K), z(K);  // (E) x3, (K) x2
    for (int64_t n = n0; n < n1; ++n) {
      load(logits, n * E, E, x.data());
      load(dprobs, n * K, K, g.data());
      for (T& gi : g) gi *= scaling;
      const int32_t* t = tp + n * K;
      std::fill(dx.begin(), dx.end(), T(0));
      if (score == RouterScore::Softmax && pre_softmax) {
        softmax(x.data(), E, s.data());
        T dot = 0;
        for (int64_t i = 0; i < K; ++i) dot += s[t[i]] * g[i];
        for (int64_t e = 0; e < E; ++e) dx[e] = s[e] * (T(0) - dot);
        for (int64_t i = 0; i < K; ++i) dx[t[i]] = s[t[i]] * (g[i] - dot);
      } else if (score == RouterScore::Softmax) {
        for (int64_t i = 0; i < K; ++i) z[i] = x[t[i]];
        softmax(z.data(), K, z.data());
        T dot = 0;
        for (int64_t i = 0; i < K; ++i) dot += z[i] * g[i];
        for (int64_t i = 0; i < K; ++i) dx[t[i]] = z[i] * (g[i] - dot);
      } else {
        T sum = 0;
        for (int64_t i = 0; i < K; ++i) sum += (z[i] = sigmoid(x[t[i]]));
        const T Z = sum + T(1e-20);
        T dot = 0;
        if (K > 1)
          for (int64_t i = 0; i < K; ++i) dot += z[i] / Z * g[i];
        for (int64_t i = 0; i < K; ++i) {
          const T ds = K > 1 ? (g[i] - dot) / Z : g[i];
          dx[t[i]] = ds * z[i] * (T(1) - z[i]);
        }
      }
      store(dlogits, n * E, E, dx.data());
    }
  });
}

// s (E) = the aux-loss scores of one row x; returns Z (sigmoid: sum + 1e-20, so s = sigmoid / Z).
template <class T>
T aux_scores(const T* x, int64_t E, RouterScore score, T* s) {
  if (score == RouterScore::Softmax) {
    softmax(x, E, s);
    return T(1);
  }
  T sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += (s[e] = sigmoid(x[e]));
  const T Z = sum + T(1e-20);
  for (int64_t e = 0; e < E; ++e) s[e] /= Z;
  return Z;
}

template <class T>
void aux_loss_impl(Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits, const Tensor& global_counts,
                   int64_t k, RouterScore score, int64_t num_seqs, double coeff, double grad_scale) {
  const int64_t N = logits.size(0), E = logits.size(1), T_seq = N / num_seqs;
  std::vector<T> scores(N * E);     // (N,E)
  std::vector<int32_t> picked(N * k);  // (N,K) each row's top-k experts
  parallel_for(N, row_grain(E), [&](int64_t n0, int64_t n1) {
    std::vector<T> x(E);  // (E)
    std::vector<int64_t> idx;
    for (int64_t n = n0; n < n1; ++n) {
      load(logits, n * E, E, x.data());
      aux_scores(x.data(), E, score, scores.data() + n * E);
      idx.resize(E);
      std::iota(idx.begin(), idx.end(), 0);
      top_k(idx, k, x.data());
      for (int64_t i = 0; i < k; ++i) picked[n * k + i] = int32_t(idx[i]);
    }
  });
  // P (num_seqs,E) and counts, summed over each sequence's tokens in order.
  std::vector<T> P(num_seqs * E, T(0)), cnt(num_seqs * E, T(0));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / T_seq;
    for (int64_t e = 0; e < E; ++e) P[q * E + e] += scores[n * E + e];
    for (int64_t i = 0; i < k; ++i) cnt[q * E + picked[n * k + i]] += T(1);
  }
  store(counts, 0, num_seqs * E, cnt.data());
  std::vector<T> tokens = cnt;  // (num_seqs,E)
  if (global_counts.defined()) load(global_counts, 0, E, tokens.data());
  const double c = N == 0 ? 0.0 : coeff * double(E) / (double(k) * double(T_seq) * double(T_seq) * double(num_seqs));
  T total = 0;
  for (size_t j = 0; j < P.size(); ++j) total += P[j] * tokens[j];
  const T l = T(c) * total;
  store(loss, 0, 1, &l);
  if (!dlogits.defined()) return;
  const T gcoef = T(grad_scale * c);
  parallel_for(N, row_grain(E), [&](int64_t n0, int64_t n1) {
    std::vector<T> x(E), s(E), g(E), d(E);  // (E) x4
    for (int64_t n = n0; n < n1; ++n) {
      load(logits, n * E, E, x.data());
      load(dlogits, n * E, E, d.data());
      const T Z = aux_scores(x.data(), E, score, s.data());
      const T* tok = tokens.data() + (n / T_seq) * E;
      T dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += s[e] * (g[e] = gcoef * tok[e]);
      for (int64_t e = 0; e < E; ++e) {
        if (score == RouterScore::Softmax) {
          d[e] += s[e] * (g[e] - dot);
        } else {
          const T sg = sigmoid(x[e]);
          d[e] += (g[e] - dot) / Z * (sg * (T(1) - sg));
        }
      }
      store(dlogits, n * E, E, d.data());
    }
  });
}

template <class T>
void z_loss_impl(Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale) {
  const int64_t N = logits.size(0), E = logits.size(1);
  std::vector<T> lse(N);  // (N)
  const T gz = N == 0 ? T(0) : T(grad_scale * coeff * 2.0 / double(N));
  parallel_for(N, row_grain(E), [&](int64_t n0, int64_t n1) {
    std::vector<T> x(E), p(E), d(E);  // (E) x3
    for (int64_t n = n0; n < n1; ++n) {
      load(logits, n * E, E, x.data());
      load(dlogits, n * E, E, d.data());
      const T m = *std::max_element(x.begin(), x.end());
      T z = 0;
      for (int64_t e = 0; e < E; ++e) z += (p[e] = std::exp(x[e] - m));
      const T l = m + std::log(z);
      lse[n] = l;
      for (int64_t e = 0; e < E; ++e) d[e] += gz * l * (p[e] / z);
      store(dlogits, n * E, E, d.data());
    }
  });
  T total = 0;
  for (T l : lse) total += l * l;
  const T out = N == 0 ? T(0) : T(coeff / double(N)) * total;
  store(loss, 0, 1, &out);
}

}  // namespace

void moe_router_fwd(Exec&, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k,
                    ops::RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk,
                    double scaling) {
  with_compute_type(logits.dtype(), [&](auto t) {
    using T = decltype(t);
    router_fwd_impl<T>(probs, top, logits, expert_bias, k, score, pre_softmax, num_groups, group_topk, T(scaling));
  });
}

void moe_router_bwd(Exec&, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top,
                    ops::RouterScore score, bool pre_softmax, double scaling) {
  with_compute_type(logits.dtype(), [&](auto t) {
    using T = decltype(t);
    router_bwd_impl<T>(dlogits, dprobs, logits, top, score, pre_softmax, T(scaling));
  });
}

void moe_aux_loss(Exec&, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits,
                  const Tensor& global_counts, int64_t k, ops::RouterScore score, int64_t num_seqs, double coeff,
                  double grad_scale) {
  with_compute_type(logits.dtype(), [&](auto t) {
    aux_loss_impl<decltype(t)>(loss, counts, dlogits, logits, global_counts, k, score, num_seqs, coeff, grad_scale);
  });
}

void moe_z_loss(Exec&, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale) {
  with_compute_type(logits.dtype(),
                    [&](auto t) { z_loss_impl<decltype(t)>(loss, dlogits, logits, coeff, grad_scale); });
}

}  // namespace hytra::cpu
