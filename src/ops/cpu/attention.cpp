// Causal GQA softmax attention, CPU reference (ops.h "attention"; docs/spec/README.md decision 7), row by row
// in the compute type (float, double for fp64). q (B,T,H,D); k (B,T,Hkv,D); v (B,T,Hkv,Dv); out (B,T,H,Dv);
// query head h reads kv head h / (H/Hkv). For query row t and keys j <= t:
//   forward   s_j = scale * q_t.k_j, m = max_j s_j, l = sum_j exp(s_j - m),
//             out_t = sum_j exp(s_j - m) v_j / l, lse_t = m + log(l)
//   backward  p_j = exp(s_j - lse_t), dp_j = dout_t.v_j, Dt = dout_t.out_t, ds_j = p_j (dp_j - Dt);
//             dq_t = scale * sum_j ds_j k_j, dk_j += scale * ds_j q_t, dv_j += p_j dout_t
// Forward runs one task per (b, h); backward one per (b, kv head), looping over the group's query
// heads in order, so every dk/dv element has a single writer and a fixed summation order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

// Rows [b, :, head, :] of a (B, T, Hh, D) tensor into dst (T, D).
template <class T>
void load_head(const Tensor& t, int64_t b, int64_t head, T* dst) {
  const int64_t T_len = t.size(1), Hh = t.size(2), D = t.size(3);
  for (int64_t s = 0; s < T_len; ++s) load(t, ((b * T_len + s) * Hh + head) * D, D, dst + s * D);
}

template <class T>
void store_head(const Tensor& t, int64_t b, int64_t head, const T* src) {
  const int64_t T_len = t.size(1), Hh = t.size(2), D = t.size(3);
  for (int64_t s = 0; s < T_len; ++s) store(t, ((b * T_len + s) * Hh + head) * D, D, src + s * D);
}

template <class T>
void attention_fwd_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, T scale) {
  const int64_t B = q.size(0), T_len = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  const int64_t group = H / Hkv;
  T* lse_p = lse.data<T>();  // (B, H, T)
  parallel_for(B * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> K(T_len * D), Q(T_len * D);    // (T, D) each
    std::vector<T> V(T_len * Dv), O(T_len * Dv);  // (T, Dv) each
    std::vector<T> s(T_len);                      // (T)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / H, h = i % H;
      load_head(k, b, h / group, K.data());
      load_head(v, b, h / group, V.data());
      load_head(q, b, h, Q.data());
      std::fill(O.begin(), O.end(), T(0));
      for (int64_t t = 0; t < T_len; ++t) {
        const T* qt = Q.data() + t * D;
        T* ot = O.data() + t * Dv;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          s[j] = scale * dot(qt, K.data() + j * D, D);
          m = std::max(m, s[j]);
        }
        T l = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const T p = std::exp(s[j] - m);
          l += p;
          const T* vj = V.data() + j * Dv;
          for (int64_t d = 0; d < Dv; ++d) ot[d] += p * vj[d];
        }
        for (int64_t d = 0; d < Dv; ++d) ot[d] /= l;
        lse_p[i * T_len + t] = m + std::log(l);
      }
      store_head(out, b, h, O.data());
    }
  });
}

template <class T>
void attention_bwd_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, T scale) {
  const int64_t B = q.size(0), T_len = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  const int64_t group = H / Hkv;
  const T* lse_p = lse.data<T>();  // (B, H, T)
  parallel_for(B * Hkv, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> K(T_len * D), dK(T_len * D), Q(T_len * D), dQ(T_len * D);      // (T, D) each
    std::vector<T> V(T_len * Dv), dV(T_len * Dv), dO(T_len * Dv), O(T_len * Dv);  // (T, Dv) each
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / Hkv, kvh = i % Hkv;
      load_head(k, b, kvh, K.data());
      load_head(v, b, kvh, V.data());
      std::fill(dK.begin(), dK.end(), T(0));
      std::fill(dV.begin(), dV.end(), T(0));
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        load_head(q, b, h, Q.data());
        load_head(dout, b, h, dO.data());
        load_head(out, b, h, O.data());
        std::fill(dQ.begin(), dQ.end(), T(0));
        for (int64_t t = 0; t < T_len; ++t) {
          const T* qt = Q.data() + t * D;
          const T* dOt = dO.data() + t * Dv;
          T* dqt = dQ.data() + t * D;
          const T Dt = dot(dOt, O.data() + t * Dv, Dv);
          const T row_lse = lse_p[(b * H + h) * T_len + t];
          for (int64_t j = 0; j <= t; ++j) {
            const T* kj = K.data() + j * D;
            const T* vj = V.data() + j * Dv;
            const T p = std::exp(scale * dot(qt, kj, D) - row_lse);
            const T ds = p * (dot(dOt, vj, Dv) - Dt);
            T* dkj = dK.data() + j * D;
            T* dvj = dV.data() + j * Dv;
            for (int64_t d = 0; d < D; ++d) {
              dqt[d] += ds * kj[d];
              dkj[d] += ds * qt[d];
            }
            for (int64_t d = 0; d < Dv; ++d) dvj[d] += p * dOt[d];
          }
          for (int64_t d = 0; d < D; ++d) dqt[d] *= scale;
        }
        store_head(dq, b, h, dQ.data());
      }
      for (T& g : dK) g *= scale;
      store_head(dk, b, kvh, dK.data());
      store_head(dv, b, kvh, dV.data());
    }
  });
}

}  // namespace

void attention_fwd(Exec&, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                   double softmax_scale) {
  with_compute_type(q.dtype(), [&](auto t) {
    using T = decltype(t);
    attention_fwd_impl<T>(out, lse, q, k, v, T(softmax_scale));
  });
}

void attention_bwd(Exec&, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, double softmax_scale) {
  with_compute_type(q.dtype(), [&](auto t) {
    using T = decltype(t);
    attention_bwd_impl<T>(dq, dk, dv, dout, q, k, v, out, lse, T(softmax_scale));
  });
}

}  // namespace hytra::cpu
