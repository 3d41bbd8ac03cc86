// Gated delta rule (gated DeltaNet core, docs/spec/mamba_gdn.md §2 steps 3-5), CPU reference (ops.h "gated delta
// rule"), in the compute type (float; double for fp64 data). Per batch b and value head h, key head
// h / (Hv/Hk):
//   qn = q * rsqrt(|q|^2 + 1e-6), kn likewise;  g_t = -exp(A_log[h]) softplus(alpha_t + dt_bias[h]);
//   beta_t = sigmoid(beta_raw_t);  S (dv,dk) from 0:
//   S_t = exp(g_t) S_{t-1} (I - beta_t kn_t kn_t^T) + beta_t v_t kn_t^T;   o_t = S_t qn_t / sqrt(dk).
// softplus: cpu_math.h's (equal to torch's thresholded one to rounding).
//
// Forward, chunk by chunk (WY/UT form). In a chunk of steps i = 0..L-1 entered with state S0, let
// D(i,j) = exp(g_{j+1} + ... + g_i) (D(i,i) = 1) and D0(i) = exp(g_0 + ... + g_i). The corrections
// u_i = beta_i (v_i - exp(g_i) S_{i-1} kn_i) solve the unit lower-triangular system
//   u_i + sum_{j<i} beta_i D(i,j) (kn_i.kn_j) u_j = beta_i (v_i - D0(i) S0 kn_i)
// (forward substitution), and then S_i = D0(i) S0 + sum_{j<=i} D(i,j) u_j kn_j^T, so
//   o_i = scale (D0(i) S0 qn_i + sum_{j<=i} D(i,j) (qn_i.kn_j) u_j),
//   S_next = D0(L-1) S0 + sum_j D(L-1,j) u_j kn_j^T.
// The decays are exponentials of sums of g over (j, i], not differences of cumulative sums, which
// lose precision when a head decays fast.
//
// Backward: the exact gradient of the per-step recurrence, run in reverse. A forward sweep (the
// chunked form) keeps the state at each chunk start; the chunks are then visited last to first, the
// chunk's per-step states recomputed from its start state by the plain recurrence, and each step
// back-propagated with P = exp(g) S_{t-1}, w = P kn, e = v - w (so S_t = P + beta e kn^T):
//   dS += scale do qn^T;  y = dS kn;  dv = beta y;  dbeta = y.e;  dqn = scale S_t^T do;
//   dkn = beta (dS^T e - P^T y);  dg = <dS, P> - beta y.w;  dS <- exp(g) (dS - beta y kn^T).
// Then through the L2 norms (du = r (dun - un (un.dun)), r = rsqrt(|u|^2 + 1e-6)), the softplus
// (dalpha = dg * -exp(A_log) softplus'(x)) and the sigmoid (dbeta_raw = dbeta * beta (1 - beta));
// dA_log += sum dg * g, ddt_bias += sum dalpha.
// Threading and order: one task per (b, value head); a head's dqn/dkn go to a scratch buffer and each
// key head sums its value heads in order; dA_log/ddt_bias are summed per (b, h) over t, then over b
// in order. No result depends on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

constexpr double kNormEps = kGdnNormEps;

// y += a x over n elements; y and x never overlap (__restrict lets the loop vectorise).
template <class T>
void axpy(T* __restrict y, T a, const T* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

struct Dims {
  int64_t B, T_len, Hk, Hv, dk, dv;
  explicit Dims(const Tensor& q, const Tensor& v)
      : B(q.size(0)), T_len(q.size(1)), Hk(q.size(2)), Hv(v.size(2)), dk(q.size(3)), dv(v.size(3)) {}
  int64_t key_head(int64_t h) const { return h / (Hv / Hk); }
  int64_t qk_off(int64_t b, int64_t t, int64_t hk) const { return ((b * T_len + t) * Hk + hk) * dk; }
  int64_t v_off(int64_t b, int64_t t, int64_t h) const { return ((b * T_len + t) * Hv + h) * dv; }
  int64_t gate_off(int64_t b, int64_t t, int64_t h) const { return (b * T_len + t) * Hv + h; }
};

// The inputs of one (b, value head) sequence.
template <class T>
struct Head {
  std::vector<T> q, k;         // (T, dk), L2-normalised
  std::vector<T> v;            // (T, dv)
  std::vector<T> x, g, beta;   // (T): alpha + dt_bias, log-decay, sigmoid(beta_raw)
};

template <class T>
void load_head(Head<T>& hd, const Dims& d, int64_t b, int64_t h, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& alpha, const Tensor& beta_raw, T neg_a, T dt_bias) {
  const int64_t hk = d.key_head(h), n = d.T_len;
  hd.q.resize(size_t(n * d.dk));
  hd.k.resize(size_t(n * d.dk));
  hd.v.resize(size_t(n * d.dv));
  hd.x.resize(size_t(n));
  hd.g.resize(size_t(n));
  hd.beta.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) {
    T* qt = hd.q.data() + t * d.dk;
    T* kt = hd.k.data() + t * d.dk;
    load(q, d.qk_off(b, t, hk), d.dk, qt);
    load(k, d.qk_off(b, t, hk), d.dk, kt);
    l2_normalize(qt, d.dk, T(kNormEps));
    l2_normalize(kt, d.dk, T(kNormEps));
    load(v, d.v_off(b, t, h), d.dv, hd.v.data() + t * d.dv);
    T a, br;
    load(alpha, d.gate_off(b, t, h), 1, &a);
    load(beta_raw, d.gate_off(b, t, h), 1, &br);
    hd.x[size_t(t)] = a + dt_bias;
    hd.g[size_t(t)] = neg_a * softplus(hd.x[size_t(t)]);
    hd.beta[size_t(t)] = sigmoid(br);
  }
}

// Buffers of one chunk of at most `chunk` steps.
template <class T>
struct ChunkWork {
  std::vector<T> decay;  // (L, L): decay[i*L + j] = D(i, j), j <= i
  std::vector<T> decay0;  // (L): D0(i)
  std::vector<T> u;       // (L, dv)
  std::vector<T> s_row;   // (dv): S0 times a vector
  ChunkWork(int64_t chunk, int64_t dv) : decay(size_t(chunk * chunk)), decay0(size_t(chunk)), u(size_t(chunk * dv)),
                                          s_row(size_t(dv)) {}
};

// S (dv, dk) advanced over steps [t0, t0+L) in the WY form; with o != null also o (L, dv) rows.
template <class T>
void chunk_fwd(const Head<T>& hd, int64_t t0, int64_t L, int64_t dk, int64_t dv, T scale, std::vector<T>& S,
               ChunkWork<T>& w, T* o) {
  const T* g = hd.g.data() + t0;
  const T* beta = hd.beta.data() + t0;
  const T* kc = hd.k.data() + t0 * dk;  // (L, dk)
  const T* qc = hd.q.data() + t0 * dk;  // (L, dk)
  const T* vc = hd.v.data() + t0 * dv;  // (L, dv)
  T* D = w.decay.data();
  for (int64_t i = 0; i < L; ++i) {
    T s = 0;
    D[i * L + i] = 1;
    for (int64_t j = i - 1; j >= 0; --j) {
      s += g[j + 1];
      D[i * L + j] = std::exp(s);
    }
    w.decay0[size_t(i)] = std::exp(s + g[0]);
  }
  // Forward substitution for u (L, dv).
  for (int64_t i = 0; i < L; ++i) {
    const T* ki = kc + i * dk;
    T* ui = w.u.data() + i * dv;
    for (int64_t r = 0; r < dv; ++r) w.s_row[size_t(r)] = dot(S.data() + r * dk, ki, dk);
    for (int64_t r = 0; r < dv; ++r) ui[r] = beta[i] * (vc[i * dv + r] - w.decay0[size_t(i)] * w.s_row[size_t(r)]);
    for (int64_t j = 0; j < i; ++j) {
      const T c = beta[i] * D[i * L + j] * dot(ki, kc + j * dk, dk);
      axpy(ui, -c, w.u.data() + j * dv, dv);
    }
  }
  if (o) {
    for (int64_t i = 0; i < L; ++i) {
      const T* qi = qc + i * dk;
      T* oi = o + i * dv;
      for (int64_t r = 0; r < dv; ++r) oi[r] = w.decay0[size_t(i)] * dot(S.data() + r * dk, qi, dk);
      for (int64_t j = 0; j <= i; ++j) {
        const T c = D[i * L + j] * dot(qi, kc + j * dk, dk);
        axpy(oi, c, w.u.data() + j * dv, dv);
      }
      for (int64_t r = 0; r < dv; ++r) oi[r] *= scale;
    }
  }
  const T d_end = w.decay0[size_t(L - 1)];
  for (T& s : S) s *= d_end;
  for (int64_t j = 0; j < L; ++j) {
    const T c = D[(L - 1) * L + j];
    const T* kj = kc + j * dk;
    const T* uj = w.u.data() + j * dv;
    for (int64_t r = 0; r < dv; ++r) axpy(S.data() + r * dk, c * uj[r], kj, dk);
  }
}

template <class T>
void fwd_impl(Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
              const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk) {
  const Dims d(q, v);
  const int64_t n = d.T_len, dk = d.dk, dv = d.dv;
  chunk = std::min(chunk, std::max<int64_t>(n, 1));
  std::vector<T> a_log(size_t(d.Hv)), dt_b(size_t(d.Hv));  // (Hv) each
  load(A_log, 0, d.Hv, a_log.data());
  load(dt_bias, 0, d.Hv, dt_b.data());
  const T scale = T(1) / std::sqrt(T(dk));
  parallel_for(d.B * d.Hv, 1, [&](int64_t i0, int64_t i1) {
    Head<T> hd;
    ChunkWork<T> w(chunk, dv);
    std::vector<T> S(size_t(dv * dk)), out(size_t(n * dv));  // (dv, dk), (T, dv)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.Hv, h = i % d.Hv;
      load_head(hd, d, b, h, q, k, v, alpha, beta_raw, -std::exp(a_log[size_t(h)]), dt_b[size_t(h)]);
      std::fill(S.begin(), S.end(), T(0));
      for (int64_t t0 = 0; t0 < n; t0 += chunk)
        chunk_fwd(hd, t0, std::min(chunk, n - t0), dk, dv, scale, S, w, out.data() + t0 * dv);
      for (int64_t t = 0; t < n; ++t) store(o, d.v_off(b, t, h), dv, out.data() + t * dv);
    }
  });
}

// Gradients of one (b, value head) sequence w.r.t. qn, kn (T, dk), v (T, dv), g and beta (T), for
// output gradient dout (T, dv).
template <class T>
struct HeadGrads {
  T* dq;
  T* dk;
  T* dv;
  T* dg;
  T* dbeta;
};

template <class T>
void head_bwd(const Head<T>& hd, const T* dout, int64_t n, int64_t dk, int64_t dv, int64_t chunk, T scale,
              const HeadGrads<T>& gr) {
  const int64_t nchunks = (n + chunk - 1) / chunk, sz = dv * dk;
  std::vector<T> starts(size_t(nchunks * sz));  // (nchunks, dv, dk): state entering each chunk
  {
    ChunkWork<T> w(chunk, dv);
    std::vector<T> S(size_t(sz), T(0));  // (dv, dk)
    for (int64_t c = 0; c < nchunks; ++c) {
      std::copy(S.begin(), S.end(), starts.begin() + c * sz);
      if (c + 1 < nchunks) chunk_fwd(hd, c * chunk, chunk, dk, dv, scale, S, w, static_cast<T*>(nullptr));
    }
  }
  std::vector<T> states(size_t((chunk + 1) * sz));  // (L+1, dv, dk): S_{t0-1} .. S_{t0+L-1}
  std::vector<T> dS(size_t(sz), T(0));              // (dv, dk)
  std::vector<T> w(dv), y(dv), e(dv);  // (dv) each
  for (int64_t c = nchunks - 1; c >= 0; --c) {
    const int64_t t0 = c * chunk, L = std::min(chunk, n - t0);
    std::copy(starts.begin() + c * sz, starts.begin() + (c + 1) * sz, states.begin());
    for (int64_t s = 0; s < L; ++s) {
      const int64_t t = t0 + s;
      const T a = std::exp(hd.g[size_t(t)]), bt = hd.beta[size_t(t)];
      const T* kt = hd.k.data() + t * dk;
      const T* vt = hd.v.data() + t * dv;
      const T* prev = states.data() + s * sz;
      T* next = states.data() + (s + 1) * sz;
      for (int64_t r = 0; r < dv; ++r) {
        const T* pr = prev + r * dk;
        T* nr = next + r * dk;
        for (int64_t j = 0; j < dk; ++j) nr[j] = a * pr[j];
        axpy(nr, bt * (vt[r] - dot(nr, kt, dk)), kt, dk);
      }
    }
    for (int64_t s = L - 1; s >= 0; --s) {
      const int64_t t = t0 + s;
      const T a = std::exp(hd.g[size_t(t)]), bt = hd.beta[size_t(t)];
      const T* kt = hd.k.data() + t * dk;
      const T* qt = hd.q.data() + t * dk;
      const T* vt = hd.v.data() + t * dv;
      const T* do_t = dout + t * dv;
      const T* prev = states.data() + s * sz;  // S_{t-1}
      const T* cur = prev + sz;                // S_t
      T* dqt = gr.dq + t * dk;
      T* dkt = gr.dk + t * dk;
      std::fill(dqt, dqt + dk, T(0));
      std::fill(dkt, dkt + dk, T(0));
      T dg = 0, db = 0;
      for (int64_t r = 0; r < dv; ++r) {
        T* dSr = dS.data() + r * dk;
        const T* pr = prev + r * dk;
        const T* cr = cur + r * dk;
        const T sdo = scale * do_t[r];
        axpy(dSr, sdo, qt, dk);
        axpy(dqt, sdo, cr, dk);
        w[size_t(r)] = a * dot(pr, kt, dk);
        y[size_t(r)] = dot(dSr, kt, dk);
        e[size_t(r)] = vt[r] - w[size_t(r)];
        gr.dv[t * dv + r] = bt * y[size_t(r)];
        db += y[size_t(r)] * e[size_t(r)];
        dg += a * dot(dSr, pr, dk) - bt * y[size_t(r)] * w[size_t(r)];
        const T by = bt * y[size_t(r)];
        axpy(dkt, bt * e[size_t(r)], dSr, dk);
        axpy(dkt, -a * by, pr, dk);
        axpy(dSr, -by, kt, dk);
        for (int64_t j = 0; j < dk; ++j) dSr[j] *= a;
      }
      gr.dg[t] = dg;
      gr.dbeta[t] = db;
    }
  }
}

// du (n) = r (dun - un (un.dun)) for u's row, r = rsqrt(|u|^2 + eps); dun in, du out (in place).
template <class T>
void l2_normalize_bwd(T* dun, const T* u, int64_t n) {
  const T r = T(1) / std::sqrt(dot(u, u, n) + T(kNormEps));
  const T c = r * r * dot(u, dun, n);  // (un.dun) / r
  for (int64_t i = 0; i < n; ++i) dun[i] = r * (dun[i] - c * u[i]);
}

template <class T>
void bwd_impl(Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw, Tensor& dA_log,
              Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk) {
  const Dims d(q, v);
  const int64_t n = d.T_len, Dk = d.dk, Dv = d.dv, group = d.Hv / d.Hk;
  chunk = std::min(chunk, std::max<int64_t>(n, 1));
  std::vector<T> a_log(size_t(d.Hv)), dt_b(size_t(d.Hv));  // (Hv) each
  load(A_log, 0, d.Hv, a_log.data());
  load(dt_bias, 0, d.Hv, dt_b.data());
  const T scale = T(1) / std::sqrt(T(Dk));
  std::vector<T> dqn(size_t(d.B * d.Hv * n * Dk)), dkn(dqn.size());  // (B, Hv, T, dk) each
  std::vector<T> dA_part(size_t(d.B * d.Hv)), ddt_part(size_t(d.B * d.Hv));  // (B, Hv) each
  parallel_for(d.B * d.Hv, 1, [&](int64_t i0, int64_t i1) {
    Head<T> hd;
    std::vector<T> dO(size_t(n * Dv)), dV(size_t(n * Dv));  // (T, dv) each
    std::vector<T> dg(n), db(n);            // (T) each
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.Hv, h = i % d.Hv;
      const T neg_a = -std::exp(a_log[size_t(h)]);
      load_head(hd, d, b, h, q, k, v, alpha, beta_raw, neg_a, dt_b[size_t(h)]);
      for (int64_t t = 0; t < n; ++t) load(dout, d.v_off(b, t, h), Dv, dO.data() + t * Dv);
      head_bwd(hd, dO.data(), n, Dk, Dv, chunk, scale,
               HeadGrads<T>{dqn.data() + i * n * Dk, dkn.data() + i * n * Dk, dV.data(), dg.data(), db.data()});
      T sum_da = 0, sum_dx = 0;
      for (int64_t t = 0; t < n; ++t) {
        store(dv, d.v_off(b, t, h), Dv, dV.data() + t * Dv);
        const T x = hd.x[size_t(t)], bt = hd.beta[size_t(t)];
        const T dx = dg[size_t(t)] * neg_a * (x > T(20) ? T(1) : sigmoid(x));
        const T dbr = db[size_t(t)] * bt * (T(1) - bt);
        store(dalpha, d.gate_off(b, t, h), 1, &dx);
        store(dbeta_raw, d.gate_off(b, t, h), 1, &dbr);
        sum_da += dg[size_t(t)] * hd.g[size_t(t)];
        sum_dx += dx;
      }
      dA_part[size_t(i)] = sum_da;
      ddt_part[size_t(i)] = sum_dx;
    }
  });
  // dq, dk rows: sum over the key head's value heads in order, then through the L2 norm.
  parallel_for(d.B * n * d.Hk, 16, [&](int64_t r0, int64_t r1) {
    std::vector<T> u(Dk), du(Dk);  // (dk) each
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (n * d.Hk), t = (r / d.Hk) % n, hk = r % d.Hk;
      for (int which = 0; which < 2; ++which) {
        const std::vector<T>& src = which == 0 ? dqn : dkn;
        std::fill(du.begin(), du.end(), T(0));
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          const T* part = src.data() + ((b * d.Hv + h) * n + t) * Dk;
          for (int64_t j = 0; j < Dk; ++j) du[size_t(j)] += part[j];
        }
        load(which == 0 ? q : k, d.qk_off(b, t, hk), Dk, u.data());
        l2_normalize_bwd(du.data(), u.data(), Dk);
        store(which == 0 ? dq : dk, d.qk_off(b, t, hk), Dk, du.data());
      }
    }
  });
  std::vector<T> cur_a(size_t(d.Hv)), cur_dt(size_t(d.Hv));  // (Hv) each
  load(dA_log, 0, d.Hv, cur_a.data());
  load(ddt_bias, 0, d.Hv, cur_dt.data());
  for (int64_t h = 0; h < d.Hv; ++h) {
    T sa = 0, sd = 0;
    for (int64_t b = 0; b < d.B; ++b) {
      sa += dA_part[size_t(b * d.Hv + h)];
      sd += ddt_part[size_t(b * d.Hv + h)];
    }
    cur_a[size_t(h)] += sa;
    cur_dt[size_t(h)] += sd;
  }
  store(dA_log, 0, d.Hv, cur_a.data());
  store(ddt_bias, 0, d.Hv, cur_dt.data());
}

}  // namespace

void gated_delta_rule_fwd(Exec&, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
                          const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) {
  with_compute_type(q.dtype(), [&](auto t) {
    fwd_impl<decltype(t)>(o, q, k, v, alpha, beta_raw, A_log, dt_bias, chunk_size);
  });
}

void gated_delta_rule_bwd(Exec&, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw,
                          Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log,
                          const Tensor& dt_bias, int64_t chunk_size) {
  with_compute_type(q.dtype(), [&](auto t) {
    bwd_impl<decltype(t)>(dq, dk, dv, dalpha, dbeta_raw, dA_log, ddt_bias, dout, q, k, v, alpha, beta_raw, A_log,
                          dt_bias, chunk_size);
  });
}

}  // namespace hytra::cpu
