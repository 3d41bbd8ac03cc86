// One-token decoding ops, CPU reference (ops.def "one-token decoding"): the recurrent form of attention (with its
// KV cache and RoPE at the token's position), the causal conv1d, the SSD scan and the gated delta rule, in the
// compute type (float, double for fp64 data), with the sequence ops' formulas (cpu/rope.cpp, cpu/attention.cpp,
// cpu/conv1d.cpp, cpu/ssd.cpp, cpu/gdn.cpp). Tensors are small (one token per sequence): plain loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/rope_math.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

// Rotates row u (D) at position pos as rope_fwd does: fp32 angle, cos/sin in the compute type.
template <class T>
void rotate(T* u, int64_t pos, int64_t R, double base, bool interleaved) {
  std::vector<T> c(static_cast<size_t>(R / 2)), s(static_cast<size_t>(R / 2));
  rope_angles(pos, rope_frequencies(R, base), T(1), T(1), c.data(), s.data());
  rope_rotate(u, R, c.data(), s.data(), interleaved);
}

// u (n) rounded to dtype d, as a store to a tensor of that dtype would leave it.
template <class T>
void round_to(DType d, T* u, int64_t n) {
  Tensor t = Tensor::empty({n}, d);
  store(t, 0, n, u);
  load(t, 0, n, u);
}

template <class T>
void attention_decode_impl(Tensor& out, Tensor& k_cache, Tensor& v_cache, const Tensor& q, const Tensor& k,
                           const Tensor& v, int64_t pos, double scale, int64_t R, double base, bool interleaved) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), G = k.size(1), S = k_cache.size(1), rep = H / G;
  std::vector<T> row(static_cast<size_t>(D)), kr(static_cast<size_t>((pos + 1) * D)),
      vr(static_cast<size_t>((pos + 1) * D)), s(static_cast<size_t>(pos + 1)), o(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < G; ++g) {  // the new key (rotated) and value into the caches
      load(k, (b * G + g) * D, D, row.data());
      rotate(row.data(), pos, R, base, interleaved);
      store(k_cache, ((b * S + pos) * G + g) * D, D, row.data());
      load(v, (b * G + g) * D, D, row.data());
      store(v_cache, ((b * S + pos) * G + g) * D, D, row.data());
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / rep;
      if (h % rep == 0)  // the group's keys and values, once for its query heads
        for (int64_t j = 0; j <= pos; ++j) {
          load(k_cache, ((b * S + j) * G + g) * D, D, kr.data() + j * D);
          load(v_cache, ((b * S + j) * G + g) * D, D, vr.data() + j * D);
        }
      load(q, (b * H + h) * D, D, row.data());
      rotate(row.data(), pos, R, base, interleaved);
      round_to(q.dtype(), row.data(), D);
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j <= pos; ++j) {
        s[size_t(j)] = T(scale) * dot(row.data(), kr.data() + j * D, D);
        m = std::max(m, s[size_t(j)]);
      }
      T l = 0;
      std::fill(o.begin(), o.end(), T(0));
      for (int64_t j = 0; j <= pos; ++j) {
        const T p = std::exp(s[size_t(j)] - m);
        l += p;
        for (int64_t d = 0; d < D; ++d) o[size_t(d)] += p * vr[size_t(j * D + d)];
      }
      for (T& x : o) x /= l;
      store(out, (b * H + h) * D, D, o.data());
    }
  }
}

template <class T>
void conv1d_step_impl(Tensor& y, Tensor& state, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  const int64_t B = x.size(0), C = x.size(1), K = w.size(1);
  std::vector<T> wv(static_cast<size_t>(C * K)), bv(static_cast<size_t>(C)), st(static_cast<size_t>((K - 1) * C)),
      xr(static_cast<size_t>(C)), p(static_cast<size_t>(C));
  load(w, 0, C * K, wv.data());
  load(bias, 0, C, bv.data());
  for (int64_t b = 0; b < B; ++b) {
    load(state, b * (K - 1) * C, (K - 1) * C, st.data());
    load(x, b * C, C, xr.data());
    for (int64_t c = 0; c < C; ++c) {
      T acc = bv[size_t(c)];
      for (int64_t j = 0; j < K - 1; ++j) acc += wv[size_t(c * K + j)] * st[size_t(j * C + c)];
      acc += wv[size_t(c * K + K - 1)] * xr[size_t(c)];
      p[size_t(c)] = silu ? acc * sigmoid(acc) : acc;
    }
    store(y, b * C, C, p.data());
    std::rotate(st.begin(), st.begin() + C, st.end());  // drop the oldest row, append x
    std::copy(xr.begin(), xr.end(), st.end() - C);
    store(state, b * (K - 1) * C, (K - 1) * C, st.data());
  }
}

template <class T>
void ssd_step_impl(Tensor& y, Tensor& state, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                   const Tensor& dt_bias, const Tensor& A_log, const Tensor& Dp) {
  const int64_t B = x.size(0), H = x.size(1), P = x.size(2), G = Bm.size(1), N = Bm.size(2), rep = H / G;
  std::vector<T> xr(static_cast<size_t>(P)), br(static_cast<size_t>(N)), cr(static_cast<size_t>(N)),
      S(static_cast<size_t>(P * N)), yr(static_cast<size_t>(P));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / rep;
      T z, bias, a_log, d;
      load(dt_raw, b * H + h, 1, &z);
      load(dt_bias, h, 1, &bias);
      load(A_log, h, 1, &a_log);
      load(Dp, h, 1, &d);
      const T dt = softplus(z + bias), decay = std::exp(dt * -std::exp(a_log));
      load(x, (b * H + h) * P, P, xr.data());
      load(Bm, (b * G + g) * N, N, br.data());
      load(Cm, (b * G + g) * N, N, cr.data());
      load(state, (b * H + h) * P * N, P * N, S.data());
      for (int64_t p = 0; p < P; ++p) {
        T* s = S.data() + p * N;
        for (int64_t n = 0; n < N; ++n) s[n] = decay * s[n] + dt * xr[size_t(p)] * br[size_t(n)];
        yr[size_t(p)] = dot(s, cr.data(), N) + d * xr[size_t(p)];
      }
      store(state, (b * H + h) * P * N, P * N, S.data());
      store(y, (b * H + h) * P, P, yr.data());
    }
}

template <class T>
void gdn_step_impl(Tensor& o, Tensor& state, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
                   const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  const int64_t B = q.size(0), Hk = q.size(1), dk = q.size(2), Hv = v.size(1), dv = v.size(2), rep = Hv / Hk;
  std::vector<T> qr(static_cast<size_t>(dk)), kr(static_cast<size_t>(dk)), vr(static_cast<size_t>(dv)),
      S(static_cast<size_t>(dv * dk)), orow(static_cast<size_t>(dv));
  const T scale = T(1) / std::sqrt(T(dk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t hk = h / rep;
      T a, br, a_log, bias;
      load(alpha, b * Hv + h, 1, &a);
      load(beta_raw, b * Hv + h, 1, &br);
      load(A_log, h, 1, &a_log);
      load(dt_bias, h, 1, &bias);
      const T decay = std::exp(-std::exp(a_log) * softplus(a + bias)), beta = sigmoid(br);
      load(q, (b * Hk + hk) * dk, dk, qr.data());
      load(k, (b * Hk + hk) * dk, dk, kr.data());
      l2_normalize(qr.data(), dk, T(kGdnNormEps));
      l2_normalize(kr.data(), dk, T(kGdnNormEps));
      load(v, (b * Hv + h) * dv, dv, vr.data());
      load(state, (b * Hv + h) * dv * dk, dv * dk, S.data());
      // S = decay S; S += beta (v - S k) k^T; o = S q scale.
      for (int64_t i = 0; i < dv; ++i) {
        T* s = S.data() + i * dk;
        for (int64_t j = 0; j < dk; ++j) s[j] *= decay;
        const T u = beta * (vr[size_t(i)] - dot(s, kr.data(), dk));
        for (int64_t j = 0; j < dk; ++j) s[j] += u * kr[size_t(j)];
        orow[size_t(i)] = dot(s, qr.data(), dk) * scale;
      }
      store(state, (b * Hv + h) * dv * dk, dv * dk, S.data());
      store(o, (b * Hv + h) * dv, dv, orow.data());
    }
}

}  // namespace

void attention_decode(Exec&, Tensor& out, Tensor& k_cache, Tensor& v_cache, const Tensor& q, const Tensor& k,
                      const Tensor& v, int64_t position, double softmax_scale, int64_t rotary_dim, double rotary_base,
                      bool interleaved) {
  with_compute_type(q.dtype(), [&](auto t) {
    attention_decode_impl<decltype(t)>(out, k_cache, v_cache, q, k, v, position, softmax_scale, rotary_dim, rotary_base,
                                       interleaved);
  });
}

void conv1d_step(Exec&, Tensor& y, Tensor& state, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  with_compute_type(x.dtype(), [&](auto t) { conv1d_step_impl<decltype(t)>(y, state, x, w, bias, silu); });
}

void ssd_step(Exec&, Tensor& y, Tensor& state, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm,
              const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D) {
  with_compute_type(x.dtype(),
                    [&](auto t) { ssd_step_impl<decltype(t)>(y, state, x, dt_raw, Bm, Cm, dt_bias, A_log, D); });
}

void gdn_step(Exec&, Tensor& o, Tensor& state, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
              const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  with_compute_type(q.dtype(),
                    [&](auto t) { gdn_step_impl<decltype(t)>(o, state, q, k, v, alpha, beta_raw, A_log, dt_bias); });
}

}  // namespace hytra::cpu
