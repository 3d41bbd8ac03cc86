// Mamba-2 SSD chunk scan, CPU reference (ops.h "SSD"; docs/spec/mamba_gdn.md §1 steps 3-4), in the compute type
// (float, double for fp64). Per batch b and head h (group g = h / (H/G)), with
//   dt_t = softplus(dt_raw_t + dt_bias[h]),  A = -exp(A_log[h]),  a_t = dt_t A  (log-decay):
//   S_t = exp(a_t) S_{t-1} + dt_t x_t B_t^T   (S in R^{P x N}, S_{-1} = 0);   y_t = S_t C_t + D[h] x_t.
//
// Forward, chunk by chunk (chunk [c0, c1), state S entering it; seg(j,i) = a_{j+1} + ... + a_i):
//   y_i = exp(seg(c0-1,i)) S C_i + sum_{c0<=j<=i} exp(seg(j,i)) dt_j (C_i.B_j) x_j + D x_i   (quadratic form)
//   S  <- exp(seg(c0-1,c1-1)) S + sum_{c0<=j<c1} exp(seg(j,c1-1)) dt_j x_j B_j^T              (state passing)
// Segment sums are accumulated outward from i (never as differences of running cumulative sums),
// so a long chunk of strong decay loses no precision to cancellation.
//
// Backward, the exact gradient of the recurrence, per step in reverse. G_t = dL/dS_t:
//   G_t = exp(a_{t+1}) G_{t+1} + dy_t C_t^T
//   dx_t = dt_t G_t B_t + D dy_t;   dB_t += dt_t G_t^T x_t;   dC_t += S_t^T dy_t   (sums over the group's heads)
//   da_t = exp(a_t) <G_t, S_{t-1}>;  ddt_t = x_t^T G_t B_t + A da_t;  ddt_raw_t = ddt_t sigmoid(dt_raw_t + dt_bias)
//   ddt_bias += sum ddt_raw;  dA_log += A sum_t da_t dt_t;  dD += sum_t dy_t . x_t
// S_t is needed in reverse order: the forward's state passing keeps the state entering each chunk,
// and the reverse sweep recomputes one chunk's states at a time from it (memory (T/Q + Q) P N).
//
// Threads: the forward runs one task per (b, h); the backward one per (b, g), its heads in order,
// so dB and dC have a single writer and a fixed summation order. Parameter gradients are summed
// per (b, h), then over b in order: results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

// Sizes of one call.
struct Dims {
  int64_t B, T, H, G, P, N;
  Dims(const Tensor& x, const Tensor& Bm)
      : B(x.size(0)), T(x.size(1)), H(x.size(2)), G(Bm.size(2)), P(x.size(3)), N(Bm.size(3)) {}
  int64_t heads_per_group() const { return H / G; }
};

// Rows [b, :, head, :] of a (B, T, heads, W) tensor (x, dy: heads H; Bm, Cm: groups G) into dst (T, W).
template <class T>
void load_rows(const Tensor& t4, int64_t b, int64_t head, T* dst) {
  const int64_t T_len = t4.size(1), heads = t4.size(2), W = t4.size(3);
  for (int64_t t = 0; t < T_len; ++t) load(t4, ((b * T_len + t) * heads + head) * W, W, dst + t * W);
}

template <class T>
void store_rows(const Tensor& t4, int64_t b, int64_t head, const T* src) {
  const int64_t T_len = t4.size(1), heads = t4.size(2), W = t4.size(3);
  for (int64_t t = 0; t < T_len; ++t) store(t4, ((b * T_len + t) * heads + head) * W, W, src + t * W);
}

// dt, the log-decay a = dt A and the softplus argument z = dt_raw + dt_bias of every step of (b, h).
template <class T>
struct StepScalars {
  std::vector<T> z, dt, a;  // (T) each
};

template <class T>
StepScalars<T> step_scalars(const Tensor& dt_raw, const Dims& d, int64_t b, int64_t h, T dt_bias, T A) {
  StepScalars<T> s{std::vector<T>(d.T), std::vector<T>(d.T), std::vector<T>(d.T)};
  const int64_t ld = dt_raw.row_pitch();  // dt_raw is row-pitched
  for (int64_t t = 0; t < d.T; ++t) {
    load(dt_raw, (b * d.T + t) * ld + h, 1, &s.z[t]);
    s.z[t] += dt_bias;
    s.dt[t] = softplus(s.z[t]);
    s.a[t] = s.dt[t] * A;
  }
  return s;
}

// S (P,N) <- the state leaving chunk [c0, c1) given S entering it (the state-passing step).
template <class T>
void pass_state(T* S, const T* X, const T* Bv, const StepScalars<T>& s, int64_t c0, int64_t c1, int64_t P, int64_t N) {
  T seg = 0;                        // seg(j, c1-1)
  std::vector<T> add(P * N, T(0));  // (P,N)
  for (int64_t j = c1 - 1; j >= c0; --j) {
    const T coef = std::exp(seg) * s.dt[j];
    const T* xj = X + j * P;
    const T* bj = Bv + j * N;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t n = 0; n < N; ++n) add[p * N + n] += coef * xj[p] * bj[n];
    seg += s.a[j];
  }
  const T decay = std::exp(seg);  // exp(seg(c0-1, c1-1))
  for (int64_t e = 0; e < P * N; ++e) S[e] = decay * S[e] + add[e];
}

template <class T>
void ssd_fwd_impl(Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                  const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t Q) {
  const Dims d(x, Bm);
  const int64_t P = d.P, N = d.N;
  std::vector<T> bias(d.H), alog(d.H), dskip(d.H);  // (H) each
  load(dt_bias, 0, d.H, bias.data());
  load(A_log, 0, d.H, alog.data());
  load(D, 0, d.H, dskip.data());
  parallel_for(d.B * d.H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> X(d.T * P), Y(d.T * P), Bv(d.T * N), Cv(d.T * N);  // (T,P), (T,P), (T,N), (T,N)
    std::vector<T> S(P * N);                                          // (P,N)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.H, h = i % d.H, g = h / d.heads_per_group();
      const T A = -std::exp(alog[h]);
      load_rows(x, b, h, X.data());
      load_rows(Bm, b, g, Bv.data());
      load_rows(Cm, b, g, Cv.data());
      const StepScalars<T> s = step_scalars(dt_raw, d, b, h, bias[h], A);
      std::fill(S.begin(), S.end(), T(0));
      for (int64_t c0 = 0; c0 < d.T; c0 += Q) {
        const int64_t c1 = std::min(d.T, c0 + Q);
        T lead = 0;  // seg(c0-1, t)
        for (int64_t t = c0; t < c1; ++t) {
          lead += s.a[t];
          const T* ct = Cv.data() + t * N;
          T* yt = Y.data() + t * P;
          const T decay = std::exp(lead);
          for (int64_t p = 0; p < P; ++p) yt[p] = decay * dot(S.data() + p * N, ct, N) + dskip[h] * X[t * P + p];
          T seg = 0;  // seg(j, t)
          for (int64_t j = t; j >= c0; --j) {
            const T coef = std::exp(seg) * s.dt[j] * dot(ct, Bv.data() + j * N, N);
            const T* xj = X.data() + j * P;
            for (int64_t p = 0; p < P; ++p) yt[p] += coef * xj[p];
            seg += s.a[j];
          }
        }
        pass_state(S.data(), X.data(), Bv.data(), s, c0, c1, P, N);
      }
      store_rows(y, b, h, Y.data());
    }
  });
}

template <class T>
void ssd_bwd_impl(Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log, Tensor& dD,
                  const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                  const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t Q) {
  const int64_t lddt = ddt_raw.row_pitch();  // ddt_raw is row-pitched
  const Dims d(x, Bm);
  const int64_t P = d.P, N = d.N, PN = d.P * d.N, hpg = d.heads_per_group();
  if (d.T == 0) return;
  Q = std::min(Q, d.T);  // one chunk of T is the same scan, and T + Q cannot overflow
  const int64_t chunks = (d.T + Q - 1) / Q, Qc = Q;
  std::vector<T> bias(d.H), alog(d.H), dskip(d.H);  // (H) each
  load(dt_bias, 0, d.H, bias.data());
  load(A_log, 0, d.H, alog.data());
  load(D, 0, d.H, dskip.data());
  std::vector<T> part(d.B * d.H * 3, T(0));  // (B,H,3): ddt_bias, dA_log, dD of each (b, h)
  parallel_for(d.B * d.G, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> X(d.T * P), dY(d.T * P), dX(d.T * P);                  // (T,P) each
    std::vector<T> Bv(d.T * N), Cv(d.T * N), dBv(d.T * N), dCv(d.T * N);  // (T,N) each
    std::vector<T> dz(d.T);                                               // (T)
    std::vector<T> entry(chunks * PN), St(Qc * PN), Gs(PN);               // (chunks,P,N), (Qc,P,N), (P,N)
    std::vector<T> gb(P), gx(N);                                          // (P), (N)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.G, g = i % d.G;
      load_rows(Bm, b, g, Bv.data());
      load_rows(Cm, b, g, Cv.data());
      std::fill(dBv.begin(), dBv.end(), T(0));
      std::fill(dCv.begin(), dCv.end(), T(0));
      for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
        const T A = -std::exp(alog[h]);
        load_rows(x, b, h, X.data());
        load_rows(dy, b, h, dY.data());
        const StepScalars<T> s = step_scalars(dt_raw, d, b, h, bias[h], A);
        std::fill(entry.begin(), entry.begin() + PN, T(0));
        for (int64_t c = 0; c + 1 < chunks; ++c) {
          std::copy(entry.begin() + c * PN, entry.begin() + (c + 1) * PN, entry.begin() + (c + 1) * PN);
          pass_state(entry.data() + (c + 1) * PN, X.data(), Bv.data(), s, c * Q, (c + 1) * Q, P, N);
        }
        std::fill(Gs.begin(), Gs.end(), T(0));
        T decay_next = 0, p_bias = 0, p_a = 0, p_d = 0;  // exp(a_{t+1}); this head's parameter sums
        for (int64_t c = chunks - 1; c >= 0; --c) {
          const int64_t c0 = c * Q, c1 = std::min(d.T, c0 + Q);
          for (int64_t t = c0; t < c1; ++t) {  // S_t for t in the chunk
            const T* prev = t == c0 ? entry.data() + c * PN : St.data() + (t - 1 - c0) * PN;
            T* cur = St.data() + (t - c0) * PN;
            const T decay = std::exp(s.a[t]);
            for (int64_t p = 0; p < P; ++p)
              for (int64_t n = 0; n < N; ++n)
                cur[p * N + n] = decay * prev[p * N + n] + s.dt[t] * X[t * P + p] * Bv[t * N + n];
          }
          for (int64_t t = c1 - 1; t >= c0; --t) {
            const T* xt = X.data() + t * P;
            const T* dyt = dY.data() + t * P;
            const T* bt = Bv.data() + t * N;
            const T* ct = Cv.data() + t * N;
            const T* st = St.data() + (t - c0) * PN;
            const T* prev = t == c0 ? entry.data() + c * PN : St.data() + (t - 1 - c0) * PN;
            T gs_prev = 0;  // <G_t, S_{t-1}>
            std::fill(gx.begin(), gx.end(), T(0));
            T* dct = dCv.data() + t * N;
            for (int64_t p = 0; p < P; ++p) {
              T* grow = Gs.data() + p * N;
              for (int64_t n = 0; n < N; ++n) {
                grow[n] = decay_next * grow[n] + dyt[p] * ct[n];
                gx[n] += grow[n] * xt[p];
                dct[n] += st[p * N + n] * dyt[p];
              }
              gb[p] = dot(grow, bt, N);
              gs_prev += dot(grow, prev + p * N, N);
            }
            T* dxt = dX.data() + t * P;
            for (int64_t p = 0; p < P; ++p) dxt[p] = s.dt[t] * gb[p] + dskip[h] * dyt[p];
            T* dbt = dBv.data() + t * N;
            for (int64_t n = 0; n < N; ++n) dbt[n] += s.dt[t] * gx[n];
            const T decay = std::exp(s.a[t]);
            const T da = decay * gs_prev;
            dz[t] = (dot(xt, gb.data(), P) + A * da) * sigmoid(s.z[t]);
            p_bias += dz[t];
            p_a += da * s.dt[t];
            p_d += dot(dyt, xt, P);
            decay_next = decay;
          }
        }
        store_rows(dx, b, h, dX.data());
        for (int64_t t = 0; t < d.T; ++t) store(ddt_raw, (b * d.T + t) * lddt + h, 1, &dz[t]);
        T* ph = part.data() + (b * d.H + h) * 3;
        ph[0] = p_bias;
        ph[1] = A * p_a;
        ph[2] = p_d;
      }
      store_rows(dB, b, g, dBv.data());
      store_rows(dC, b, g, dCv.data());
    }
  });
  for (auto [k, grad] : {std::pair<int, Tensor*>{0, &ddt_bias}, {1, &dA_log}, {2, &dD}}) {
    std::vector<T> acc(d.H);  // (H)
    load(*grad, 0, d.H, acc.data());
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t b = 0; b < d.B; ++b) acc[h] += part[(b * d.H + h) * 3 + k];
    store(*grad, 0, d.H, acc.data());
  }
}

}  // namespace

void ssd_chunk_scan_fwd(Exec&, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                        const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size,
                        std::vector<Tensor>*) {  // keeps nothing: the backward recomputes
  with_compute_type(x.dtype(),
                    [&](auto t) { ssd_fwd_impl<decltype(t)>(y, x, dt_raw, Bm, Cm, dt_bias, A_log, D, chunk_size); });
}

void ssd_chunk_scan_bwd(Exec&, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log,
                        Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm,
                        const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D,
                        int64_t chunk_size, const std::vector<Tensor>*) {
  with_compute_type(x.dtype(), [&](auto t) {
    ssd_bwd_impl<decltype(t)>(dx, ddt_raw, dB, dC, ddt_bias, dA_log, dD, dy, x, dt_raw, Bm, Cm, dt_bias, A_log, D,
                              chunk_size);
  });
}

}  // namespace hytra::cpu
