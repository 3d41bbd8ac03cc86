// Gated delta rule (gated DeltaNet core, docs/spec/mamba_gdn.md §2 steps 3-5), forward and backward (ops.h
// "gated delta rule"), fp32 math and state, fp32 or bf16 activations. Per batch b and value head h:
//   S_t = a_t S_{t-1} + u_t kn_t^T,  u_t = beta_t (v_t - a_t S_{t-1} kn_t),  a_t = exp(g_t),
//   o_t = scale S_t qn_t = scale (a_t S_{t-1} qn_t + u_t (kn_t.qn_t)),
// with qn, kn the L2-normalised q, k of key head h / (Hv/Hk), g and beta as in ops.h.
// Sequential in time, one block per (b, value head); chunk_size does not change the result beyond
// rounding, so it is not used here. The (dv, dk) state lives in registers: thread (slot, lane) of
// kTpr lanes per row holds rows slot + slots*r (r < NR) and columns lane + kTpr*c (c < NC); row
// sums are shuffles over the row's kTpr lanes, and rows never talk to each other in the forward.
// Steps are staged kStage at a time in shared memory: q, k normalised there (one warp per step),
// v (and dout), exp(g), beta and kn.qn.
// Backward (formulas in ops/cpu/gdn.cpp), one kernel per (b, head): a forward sweep saves the state
// entering every kCk-step chunk (global scratch); chunks are then revisited last to first, their
// per-step states recomputed into a per-block global scratch and read back while stepping dS
// (registers) backwards. dv is row-local; the per-step sums over rows (dqn, dkn, dg, dbeta) are
// reduced over the block in a fixed order (shuffles, then warps in order through shared memory)
// into fp32 buffers. A second kernel sums dqn/dkn over each key head's value heads in order and
// applies the L2-norm backward; a third, one block per head, writes dalpha/dbeta_raw and adds the
// fixed-order block sums over (B, T) into dA_log and ddt_bias. No atomics: bitwise deterministic.
// Limits: dk, dv <= 128.
#include <cmath>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kTpr = 8;         // threads per state row
constexpr int kMaxDk = 128;     // NC <= 16
constexpr int kMaxDv = 128;     // NR <= 2 with 64 row slots
constexpr int kMaxThreads = 512;
constexpr int kStage = 16;      // steps staged in shared memory at a time
constexpr int kCk = 64;         // steps between backward checkpoints (a multiple of kStage)
constexpr float kNormEps = 1e-6f;
static_assert(kCk % kStage == 0, "chunks are whole stages");

struct Args {
  const void* q;         // (B,T,Hk,dk)
  const void* k;         // (B,T,Hk,dk)
  const void* v;         // (B,T,Hv,dv)
  const void* alpha;     // (B,T,Hv)
  const void* beta_raw;  // (B,T,Hv)
  const float* A_log;    // (Hv)
  const float* dt_bias;  // (Hv)
  DType dt;              // of the activations
  int64_t T;
  int Hk, Hv, dk, dv;
  float scale;
};

struct Stage {
  float q[kStage][kMaxDk];  // normalised, zero past dk up to the padded width
  float k[kStage][kMaxDk];
  float v[kStage][kMaxDv];  // zero past dv up to the padded height
  float dout[kStage][kMaxDv];
  float kq[kStage];  // kn.qn
  float a[kStage];   // exp(g)
  float beta[kStage];
};

// Steps [t0, t0+n) of head (b, h) into st, one warp per step; dout may be null. dk_pad/dv_pad: the
// widths the threads read (kTpr*NC, slots*NR).
__device__ void stage_load(Stage& st, const Args& p, const void* dout, int64_t b, int h, int64_t t0, int n,
                           int dk_pad, int dv_pad) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int hk = h / (p.Hv / p.Hk);
  for (int s = warp; s < n; s += nwarps) {
    const int64_t bt = b * p.T + t0 + s;
    const int64_t qo = (bt * p.Hk + hk) * p.dk, vo = (bt * p.Hv + h) * p.dv, go = bt * p.Hv + h;
    float ssq = 0.0f, ssk = 0.0f;
    for (int j = lane; j < dk_pad; j += 32) {
      const float qv = j < p.dk ? load_f(p.q, p.dt, qo + j) : 0.0f;
      const float kv = j < p.dk ? load_f(p.k, p.dt, qo + j) : 0.0f;
      st.q[s][j] = qv;
      st.k[s][j] = kv;
      ssq += qv * qv;
      ssk += kv * kv;
    }
    const float rq = 1.0f / sqrtf(warp_sum(ssq) + kNormEps), rk = 1.0f / sqrtf(warp_sum(ssk) + kNormEps);
    float kq = 0.0f;
    for (int j = lane; j < dk_pad; j += 32) {
      const float qn = st.q[s][j] * rq, kn = st.k[s][j] * rk;
      st.q[s][j] = qn;
      st.k[s][j] = kn;
      kq += qn * kn;
    }
    kq = warp_sum(kq);
    for (int j = lane; j < dv_pad; j += 32) {
      st.v[s][j] = j < p.dv ? load_f(p.v, p.dt, vo + j) : 0.0f;
      if (dout != nullptr) st.dout[s][j] = j < p.dv ? load_f(dout, p.dt, vo + j) : 0.0f;
    }
    if (lane == 0) {
      const float x = load_f(p.alpha, p.dt, go) + p.dt_bias[h];
      st.a[s] = expf(-expf(p.A_log[h]) * softplus(x));
      st.beta[s] = sigmoid(load_f(p.beta_raw, p.dt, go));
      st.kq[s] = kq;
    }
  }
}

// Sum over the kTpr lanes of a row.
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int o = 1; o < kTpr; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One step of the recurrence on this thread's part of S; out[r] = (S_t qn)_i (unscaled).
template <int NC, int NR>
__device__ __forceinline__ void step_fwd(float (&S)[NR][NC], const Stage& st, int s, int row0, int slots, int lr,
                                         float (&out)[NR]) {
  const float a = st.a[s], bt = st.beta[s], kq = st.kq[s];
  float kr[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) kr[c] = st.k[s][lr + kTpr * c];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    float sk = 0.0f, sq = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      sk += S[r][c] * kr[c];
      sq += S[r][c] * st.q[s][lr + kTpr * c];
    }
    sk = row_sum(sk);
    sq = row_sum(sq);
    const float u = bt * (st.v[s][row0 + slots * r] - a * sk);
    out[r] = a * sq + u * kq;
#pragma unroll
    for (int c = 0; c < NC; ++c) S[r][c] = a * S[r][c] + u * kr[c];
  }
}

template <int NC, int NR>
__global__ void __launch_bounds__(kMaxThreads) gdn_fwd_kernel(Args p, void* o) {
  __shared__ Stage st;
  const int64_t b = blockIdx.x / p.Hv;
  const int h = int(blockIdx.x % p.Hv);
  const int slots = blockDim.x / kTpr, slot = threadIdx.x / kTpr, lr = threadIdx.x % kTpr;
  float S[NR][NC] = {};
  for (int64_t t0 = 0; t0 < p.T; t0 += kStage) {
    const int n = int(min(int64_t(kStage), p.T - t0));
    __syncthreads();
    stage_load(st, p, nullptr, b, h, t0, n, kTpr * NC, slots * NR);
    __syncthreads();
    for (int s = 0; s < n; ++s) {
      float out[NR];
      step_fwd<NC, NR>(S, st, s, slot, slots, lr, out);
      if (lr == 0) {
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          const int i = slot + slots * r;
          if (i < p.dv) store_f(o, p.dt, ((b * p.T + t0 + s) * p.Hv + h) * p.dv + i, p.scale * out[r]);
        }
      }
    }
  }
}

// This thread's part of a state, kept as [reg][thread] (coalesced), and back.
template <int NC, int NR>
__device__ __forceinline__ void save_state(const float (&S)[NR][NC], float* dst) {
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) dst[(r * NC + c) * blockDim.x + threadIdx.x] = S[r][c];
}
template <int NC, int NR>
__device__ __forceinline__ void load_state(float (&S)[NR][NC], const float* src) {
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) S[r][c] = src[(r * NC + c) * blockDim.x + threadIdx.x];
}

// Outputs of the backward scan. dqn, dkn (B,T,Hv,dk) and dg, dbeta (B,T,Hv) are fp32 sums over the
// head's rows; dv (B,T,Hv,dv) in the activations' dtype.
struct BwdOut {
  void* dv;
  float* dqn;
  float* dkn;
  float* dg;
  float* dbeta;
};

// ck: (blocks, nck, NR*NC, threads) states entering each chunk; states: (blocks, kCk, NR*NC,
// threads) states entering each step of the current chunk. Dynamic shared memory: 2 buffers of
// (warps, 2*kTpr*NC + 2) per-warp partial sums.
template <int NC, int NR>
__global__ void __launch_bounds__(kMaxThreads) gdn_bwd_kernel(Args p, const void* dout, BwdOut out, float* ck,
                                                              float* states) {
  __shared__ Stage st;
  extern __shared__ float red[];
  constexpr int kRegs = NR * NC, kDkPad = kTpr * NC, kStride = 2 * kDkPad + 2;
  const int64_t b = blockIdx.x / p.Hv;
  const int h = int(blockIdx.x % p.Hv);
  const int nthreads = blockDim.x, nwarps = nthreads / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slots = nthreads / kTpr, slot = threadIdx.x / kTpr, lr = threadIdx.x % kTpr;
  const int dv_pad = slots * NR;
  const int64_t nck = (p.T + kCk - 1) / kCk, state_size = int64_t(kRegs) * nthreads;
  float* my_ck = ck + int64_t(blockIdx.x) * nck * state_size;
  float* my_states = states + int64_t(blockIdx.x) * kCk * state_size;

  // Forward sweep: the state entering each chunk (the last chunk's steps are not needed).
  float S[NR][NC] = {};
  for (int64_t t0 = 0; t0 < (nck - 1) * kCk; t0 += kStage) {
    __syncthreads();
    stage_load(st, p, nullptr, b, h, t0, kStage, kDkPad, dv_pad);
    __syncthreads();
    for (int s = 0; s < kStage; ++s) {
      if ((t0 + s) % kCk == 0) save_state<NC, NR>(S, my_ck + (t0 + s) / kCk * state_size);
      float unused[NR];
      step_fwd<NC, NR>(S, st, s, slot, slots, lr, unused);
    }
  }
  save_state<NC, NR>(S, my_ck + (nck - 1) * state_size);

  float dS[NR][NC] = {};
  int buf = 0;
  for (int64_t c = nck - 1; c >= 0; --c) {
    const int64_t c0 = c * kCk;
    const int L = int(min(int64_t(kCk), p.T - c0));
    // Recompute the chunk's per-step states.
    load_state<NC, NR>(S, my_ck + c * state_size);
    for (int ts = 0; ts < L; ts += kStage) {
      const int n = min(kStage, L - ts);
      __syncthreads();
      stage_load(st, p, nullptr, b, h, c0 + ts, n, kDkPad, dv_pad);
      __syncthreads();
      for (int s = 0; s < n; ++s) {
        save_state<NC, NR>(S, my_states + (ts + s) * state_size);
        float unused[NR];
        step_fwd<NC, NR>(S, st, s, slot, slots, lr, unused);
      }
    }
    // Steps in reverse.
    for (int ts = (L - 1) / kStage * kStage; ts >= 0; ts -= kStage) {
      const int n = min(kStage, L - ts);
      __syncthreads();
      stage_load(st, p, dout, b, h, c0 + ts, n, kDkPad, dv_pad);
      __syncthreads();
      for (int s = n - 1; s >= 0; --s) {
        const int64_t bt = b * p.T + c0 + ts + s;
        const float* prev = my_states + (ts + s) * state_size + threadIdx.x;  // S_{t-1}
        const float a = st.a[s], beta = st.beta[s];
        float kr[NC], dqp[NC], dkp[NC];
#pragma unroll
        for (int cc = 0; cc < NC; ++cc) {
          kr[cc] = st.k[s][lr + kTpr * cc];
          dqp[cc] = 0.0f;
          dkp[cc] = 0.0f;
        }
        float dgp = 0.0f, dbp = 0.0f;
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          const int i = slot + slots * r;
          const float sdo = p.scale * st.dout[s][i], vi = st.v[s][i];
          float P[NC];
          float w = 0.0f, y = 0.0f;
#pragma unroll
          for (int cc = 0; cc < NC; ++cc) {
            P[cc] = a * prev[(r * NC + cc) * nthreads];
            dS[r][cc] += sdo * st.q[s][lr + kTpr * cc];
            w += P[cc] * kr[cc];
            y += dS[r][cc] * kr[cc];
          }
          w = row_sum(w);
          y = row_sum(y);
          const float e = vi - w, be = beta * e, by = beta * y;
#pragma unroll
          for (int cc = 0; cc < NC; ++cc) {
            dqp[cc] += sdo * (P[cc] + be * kr[cc]);
            dkp[cc] += be * dS[r][cc] - by * P[cc];
            dgp += dS[r][cc] * P[cc];
            dS[r][cc] = a * (dS[r][cc] - by * kr[cc]);
          }
          if (lr == 0) {
            dgp -= by * w;
            dbp += y * e;
            if (i < p.dv) store_f(out.dv, p.dt, bt * p.Hv * p.dv + int64_t(h) * p.dv + i, by);
          }
        }
        // Sum over the block's rows: the warp's 32/kTpr row slots by shuffles, then warps in order.
#pragma unroll
        for (int cc = 0; cc < NC; ++cc)
#pragma unroll
          for (int o = kTpr; o < 32; o <<= 1) {
            dqp[cc] += __shfl_xor_sync(0xffffffffu, dqp[cc], o);
            dkp[cc] += __shfl_xor_sync(0xffffffffu, dkp[cc], o);
          }
        dgp = warp_sum(dgp);
        dbp = warp_sum(dbp);
        float* rb = red + buf * nwarps * kStride;
        if (lane < kTpr) {
#pragma unroll
          for (int cc = 0; cc < NC; ++cc) {
            rb[warp * kStride + lr + kTpr * cc] = dqp[cc];
            rb[warp * kStride + kDkPad + lr + kTpr * cc] = dkp[cc];
          }
        }
        if (lane == 0) {
          rb[warp * kStride + 2 * kDkPad] = dgp;
          rb[warp * kStride + 2 * kDkPad + 1] = dbp;
        }
        __syncthreads();  // red[buf] complete; the other buffer is free for the next step
        for (int idx = threadIdx.x; idx < kStride; idx += nthreads) {
          float sum = 0.0f;
          for (int wi = 0; wi < nwarps; ++wi) sum += rb[wi * kStride + idx];
          const int64_t go = bt * p.Hv + h;
          if (idx < p.dk)
            out.dqn[go * p.dk + idx] = sum;
          else if (idx >= kDkPad && idx < kDkPad + p.dk)
            out.dkn[go * p.dk + idx - kDkPad] = sum;
          else if (idx == 2 * kDkPad)
            out.dg[go] = sum;
          else if (idx == 2 * kDkPad + 1)
            out.dbeta[go] = sum;
        }
        buf ^= 1;
      }
    }
  }
}

// One warp per (b, t, key head): dq, dk rows from the sums of dqn, dkn over the key head's value
// heads (in order), through the L2 norm: du = r (dun - r^2 (u.dun) u), r = rsqrt(|u|^2 + eps).
__global__ void gdn_qk_grad_kernel(void* dq, void* dk, const void* q, const void* k, DType dt, const float* dqn,
                                   const float* dkn, int64_t rows, int Hk, int Hv, int dk_len) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int group = Hv / Hk, hk = int(row % Hk);
  const int64_t bt = row / Hk;
  for (int which = 0; which < 2; ++which) {
    const void* u = which == 0 ? q : k;
    const float* dn = which == 0 ? dqn : dkn;
    float dsum[kMaxDk / 32], uv[kMaxDk / 32];
    float ss = 0.0f, ud = 0.0f;
#pragma unroll
    for (int m = 0; m < kMaxDk / 32; ++m) {
      const int j = lane + 32 * m;
      dsum[m] = 0.0f;
      uv[m] = 0.0f;
      if (j < dk_len) {
        for (int g = 0; g < group; ++g) dsum[m] += dn[(bt * Hv + hk * group + g) * dk_len + j];
        uv[m] = load_f(u, dt, row * dk_len + j);
      }
      ss += uv[m] * uv[m];
      ud += uv[m] * dsum[m];
    }
    const float r = 1.0f / sqrtf(warp_sum(ss) + kNormEps);
    const float c = r * r * warp_sum(ud);
#pragma unroll
    for (int m = 0; m < kMaxDk / 32; ++m) {
      const int j = lane + 32 * m;
      if (j < dk_len) store_f(which == 0 ? dq : dk, dt, row * dk_len + j, r * (dsum[m] - c * uv[m]));
    }
  }
}

// One block per value head h: dalpha, dbeta_raw over (B, T); dA_log[h] += sum dg * g and
// ddt_bias[h] += sum dalpha, each thread summing its strided elements, then block_sum.
constexpr int kGateThreads = 256;
__global__ void __launch_bounds__(kGateThreads) gdn_gate_grad_kernel(void* dalpha, void* dbeta_raw, float* dA_log,
                                                                     float* ddt_bias, const void* alpha,
                                                                     const void* beta_raw, DType dt,
                                                                     const float* A_log, const float* dt_bias,
                                                                     const float* dg, const float* dbeta,
                                                                     int64_t BT, int Hv) {
  __shared__ float red[32];
  const int h = blockIdx.x;
  const float ea = expf(A_log[h]);
  float sa = 0.0f, sd = 0.0f;
  for (int64_t n = threadIdx.x; n < BT; n += blockDim.x) {
    const int64_t i = n * Hv + h;
    const float x = load_f(alpha, dt, i) + dt_bias[h];
    const float beta = sigmoid(load_f(beta_raw, dt, i));
    const float dx = -dg[i] * ea * (x > 20.0f ? 1.0f : sigmoid(x));
    store_f(dalpha, dt, i, dx);
    store_f(dbeta_raw, dt, i, dbeta[i] * beta * (1.0f - beta));
    sa += dg[i] * (-ea * softplus(x));
    sd += dx;
  }
  sa = block_sum(sa, red);
  sd = block_sum(sd, red);
  if (threadIdx.x == 0) {
    dA_log[h] += sa;
    ddt_bias[h] += sd;
  }
}

struct Tile {
  int nc, nr, threads;
};

// Columns per thread NC (2..16) for dk, rows per thread NR (1, 2) for dv; whole warps.
Tile tile_for(int dk, int dv) {
  Tile t;
  t.nc = dk <= 16 ? 2 : dk <= 32 ? 4 : dk <= 64 ? 8 : 16;
  t.nr = dv <= 64 ? 1 : 2;
  const int slots = ((dv + t.nr - 1) / t.nr + 3) / 4 * 4;
  t.threads = slots * kTpr;
  return t;
}

template <class F>
void with_tile(const Tile& t, F&& f) {
  auto nr = [&](auto nc) {
    if (t.nr == 1)
      f(nc, std::integral_constant<int, 1>{});
    else
      f(nc, std::integral_constant<int, 2>{});
  };
  switch (t.nc) {
    case 2: return nr(std::integral_constant<int, 2>{});
    case 4: return nr(std::integral_constant<int, 4>{});
    case 8: return nr(std::integral_constant<int, 8>{});
    default: return nr(std::integral_constant<int, 16>{});
  }
}

Args make_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
               const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  HYTRA_CHECK(q.dtype() == DType::F32 || q.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", q.desc());
  HYTRA_CHECK(A_log.dtype() == DType::F32 && dt_bias.dtype() == DType::F32, op,
              " on CUDA: A_log and dt_bias must be fp32, got ", A_log.desc(), ", ", dt_bias.desc());
  const int64_t dk = q.size(3), dv = v.size(3), B = q.size(0), Hv = v.size(2);
  HYTRA_CHECK(dk <= kMaxDk && dv <= kMaxDv, op, " on CUDA: head dims dk = ", dk, ", dv = ", dv,
              " (at most ", kMaxDk, " and ", kMaxDv, ")");
  HYTRA_CHECK(B * Hv < (int64_t(1) << 31), op, " on CUDA: B*Hv too large");
  return Args{q.raw(),          k.raw(),         v.raw(),        alpha.raw(),    beta_raw.raw(),
              A_log.data<float>(), dt_bias.data<float>(), q.dtype(), q.size(1),      int(q.size(2)),
              int(Hv),          int(dk),         int(dv),        float(1.0 / std::sqrt(double(dk)))};
}

}  // namespace

void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
                          const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) {
  const Args p = make_args("gated_delta_rule_fwd", q, k, v, alpha, beta_raw, A_log, dt_bias);
  const int64_t B = q.size(0);
  if (B == 0 || p.T == 0 || p.Hv == 0 || p.dv == 0) return;
  const Tile tile = tile_for(p.dk, p.dv);
  with_tile(tile, [&](auto nc, auto nr) {
    constexpr int NC = decltype(nc)::value, NR = decltype(nr)::value;
    gdn_fwd_kernel<NC, NR><<<unsigned(B * p.Hv), tile.threads, 0, stream_of(ex)>>>(p, o.raw());
  });
  check_launch("gdn_fwd_kernel");
}

void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw,
                          Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log,
                          const Tensor& dt_bias, int64_t chunk_size) {
  const char* op = "gated_delta_rule_bwd";
  const Args p = make_args(op, q, k, v, alpha, beta_raw, A_log, dt_bias);
  HYTRA_CHECK(dA_log.dtype() == DType::F32 && ddt_bias.dtype() == DType::F32, op,
              " on CUDA: dA_log and ddt_bias must be fp32");
  const int64_t B = q.size(0), T = p.T;
  if (B == 0 || T == 0 || p.Hv == 0) return;
  cudaStream_t s = stream_of(ex);
  const Tile tile = tile_for(p.dk, p.dv);
  const int64_t blocks = B * p.Hv, nck = (T + kCk - 1) / kCk;
  const int64_t state_size = int64_t(tile.nr) * tile.nc * tile.threads;
  Tensor ck = Tensor::empty({blocks * nck * state_size}, DType::F32, Device::CUDA);      // (B*Hv, nck, state)
  Tensor states = Tensor::empty({blocks * kCk * state_size}, DType::F32, Device::CUDA);  // (B*Hv, kCk, state)
  Tensor dqn = Tensor::empty({B, T, p.Hv, p.dk}, DType::F32, Device::CUDA);             // (B,T,Hv,dk)
  Tensor dkn = Tensor::empty({B, T, p.Hv, p.dk}, DType::F32, Device::CUDA);             // (B,T,Hv,dk)
  Tensor dg = Tensor::empty({B, T, p.Hv}, DType::F32, Device::CUDA);                     // (B,T,Hv)
  Tensor dbeta = Tensor::empty({B, T, p.Hv}, DType::F32, Device::CUDA);                  // (B,T,Hv)
  const BwdOut out{dv.raw(), dqn.data<float>(), dkn.data<float>(), dg.data<float>(), dbeta.data<float>()};
  const int smem = 2 * (tile.threads / 32) * (2 * kTpr * tile.nc + 2) * int(sizeof(float));
  with_tile(tile, [&](auto nc, auto nr) {
    constexpr int NC = decltype(nc)::value, NR = decltype(nr)::value;
    cuda_check(cudaFuncSetAttribute(gdn_bwd_kernel<NC, NR>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
               "gdn_bwd_kernel smem");
    gdn_bwd_kernel<NC, NR><<<unsigned(blocks), tile.threads, smem, s>>>(p, dout.raw(), out, ck.data<float>(),
                                                                         states.data<float>());
  });
  check_launch("gdn_bwd_kernel");
  const int64_t rows = B * T * p.Hk;
  constexpr int kRowsPerBlock = 8;
  gdn_qk_grad_kernel<<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0, s>>>(
      dq.raw(), dk.raw(), q.raw(), k.raw(), p.dt, dqn.data<float>(), dkn.data<float>(), rows, p.Hk, p.Hv, p.dk);
  check_launch("gdn_qk_grad_kernel");
  gdn_gate_grad_kernel<<<unsigned(p.Hv), kGateThreads, 0, s>>>(
      dalpha.raw(), dbeta_raw.raw(), dA_log.data<float>(), ddt_bias.data<float>(), alpha.raw(), beta_raw.raw(), p.dt,
      p.A_log, p.dt_bias, dg.data<float>(), dbeta.data<float>(), B * T, p.Hv);
  check_launch("gdn_gate_grad_kernel");
}

}  // namespace hytra::cuda
