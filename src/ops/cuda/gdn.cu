// Gated delta rule (gated DeltaNet core, docs/spec/mamba_gdn.md §2 steps 3-5), forward and backward (ops.def
// "gated delta rule") on CUDA, in the chunked WY/UT form: the kernels and their formulas are in
// gdn_chunk.cuh (gdn_prep.cu, gdn_state.cu, gdn_bwd_dqk.cu, gdn_bwd_wy.cu); this file allocates the
// workspaces and runs them in order, and holds the two closing kernels of the backward.
// Forward: prep (per chunk: gates, T, W, U, P) -> state pass (sequential over chunks: o).
// Backward (recomputing the chunk states from the inputs): prep (also T) -> state pass (S0, Vn) ->
// dS pass (sequential, last chunk first: dS, dVn) -> per-chunk dqn, dkn, dW, dgam -> per-chunk WY
// backward (dv, dkn, dbeta, dg) -> the sums over each key head's value heads through the L2 norm
// (dq, dk) -> the gates (dalpha, dbeta_raw, dA_log, ddt_bias). bf16 runs on tensor cores (mma.sync,
// fp32 accumulation) with chunks of 64; fp32 on the scalar path with chunks of 32; states fp32 in
// the sequential passes. Every reduction has a fixed order and there are no atomics: bitwise
// deterministic. Limits: dk, dv <= 128.
#include <cmath>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda {
namespace {

constexpr int kMaxHeadDim = 128;

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
    float dsum[kMaxHeadDim / 32], uv[kMaxHeadDim / 32];
    float ss = 0.0f, ud = 0.0f;
#pragma unroll
    for (int m = 0; m < kMaxHeadDim / 32; ++m) {
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
    const float r = 1.0f / sqrtf(warp_sum(ss) + gdn::kNormEps);
    const float c = r * r * warp_sum(ud);
#pragma unroll
    for (int m = 0; m < kMaxHeadDim / 32; ++m) {
      const int j = lane + 32 * m;
      if (j < dk_len) store_f(which == 0 ? dq : dk, dt, row * dk_len + j, r * (dsum[m] - c * uv[m]));
    }
  }
}

// One block per value head h: dalpha, dbeta_raw over (B, T); dA_log[h] += sum dg * g and
// ddt_bias[h] += sum dalpha, each thread summing its strided elements, then block_sum.
constexpr int kGateThreads = 256;
__global__ void __launch_bounds__(kGateThreads)
    gdn_gate_grad_kernel(void* dalpha, void* dbeta_raw, float* dA_log, float* ddt_bias, const void* alpha,
                         const void* beta_raw, DType dt, const float* A_log, const float* dt_bias, const float* dg,
                         const float* dbeta, int64_t BT, int Hv) {
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

int round32(int64_t n) { return int((n + 31) / 32 * 32); }

template <class E>
gdn::Dims dims_of(const Tensor& q, const Tensor& v) {
  const int64_t T = q.size(1);
  return gdn::Dims{q.size(0),
                   T,
                   int(q.size(2)),
                   int(v.size(2)),
                   int(q.size(3)),
                   int(v.size(3)),
                   round32(q.size(3)),
                   round32(v.size(3)),
                   int((T + gdn::kChunk<E> - 1) / gdn::kChunk<E>),
                   float(1.0 / std::sqrt(double(q.size(3))))};
}

template <class E>
gdn::Inputs<E> inputs_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw,
                         const Tensor& A_log, const Tensor& dt_bias) {
  return {static_cast<const E*>(q.raw()),
          static_cast<const E*>(k.raw()),
          static_cast<const E*>(v.raw()),
          static_cast<const E*>(alpha.raw()),
          static_cast<const E*>(beta_raw.raw()),
          A_log.data<float>(),
          dt_bias.data<float>()};
}

// Workspaces on q's device; the forward needs the first four.
struct Buffers {
  Tensor gates, w, u, p, t, s0, vn, ds, dvn, dw, dgam, dqn, dkn, dg, dbeta;
  template <class E>
  gdn::Work<E> work() {
    auto e = [](Tensor& x) { return x.defined() ? static_cast<E*>(x.raw()) : nullptr; };
    auto f = [](Tensor& x) { return x.defined() ? x.data<float>() : nullptr; };
    return {f(gates), e(w),  e(u),    e(p),   e(t),   e(s0), e(vn),   e(ds),
            e(dvn),   e(dw), f(dgam), f(dqn), f(dkn), f(dg), f(dbeta)};
  }
};

template <class E>
Buffers forward_buffers(const gdn::Dims& d, DType dt, Device dev) {
  const int64_t C = gdn::kChunk<E>, chunks = d.B * d.Hv * d.nc;
  Buffers b;
  b.gates = Tensor::empty({chunks, gdn::kGates, C}, DType::F32, dev);  // (BHnc, kGates, C)
  b.w = Tensor::empty({chunks, C, d.dkp}, dt, dev);                    // (BHnc, C, dkp)
  b.u = Tensor::empty({chunks, C, d.dvp}, dt, dev);                    // (BHnc, C, dvp)
  b.p = Tensor::empty({chunks, C, C}, dt, dev);                        // (BHnc, C, C)
  return b;
}

template <class E>
void run_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
             const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  const gdn::Dims d = dims_of<E>(q, v);
  const gdn::Inputs<E> in = inputs_of<E>(q, k, v, alpha, beta_raw, A_log, dt_bias);
  Buffers b = forward_buffers<E>(d, q.dtype(), q.device());
  const gdn::Work<E> ws = b.work<E>();
  gdn::launch_prep(d, in, ws, stream_of(ex));
  gdn::launch_state_fwd(d, in, ws, static_cast<E*>(o.raw()), stream_of(ex));
}

template <class E>
void run_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw, Tensor& dA_log,
             Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  const gdn::Dims d = dims_of<E>(q, v);
  const gdn::Inputs<E> in = inputs_of<E>(q, k, v, alpha, beta_raw, A_log, dt_bias);
  const DType dt = q.dtype();
  const Device dev = q.device();
  const int64_t C = gdn::kChunk<E>, chunks = d.B * d.Hv * d.nc;
  Buffers b = forward_buffers<E>(d, dt, dev);
  b.t = Tensor::empty({chunks, C, C}, dt, dev);                    // (BHnc, C, C)
  b.s0 = Tensor::empty({chunks, d.dvp, d.dkp}, dt, dev);           // (BHnc, dvp, dkp)
  b.vn = Tensor::empty({chunks, C, d.dvp}, dt, dev);               // (BHnc, C, dvp)
  b.ds = Tensor::empty({chunks, d.dvp, d.dkp}, dt, dev);           // (BHnc, dvp, dkp)
  b.dvn = Tensor::empty({chunks, C, d.dvp}, dt, dev);              // (BHnc, C, dvp)
  b.dw = Tensor::empty({chunks, C, d.dkp}, dt, dev);               // (BHnc, C, dkp)
  b.dgam = Tensor::empty({chunks, C}, DType::F32, dev);            // (BHnc, C)
  b.dqn = Tensor::empty({d.B, d.T, d.Hv, d.dk}, DType::F32, dev);  // (B,T,Hv,dk)
  b.dkn = Tensor::empty({d.B, d.T, d.Hv, d.dk}, DType::F32, dev);  // (B,T,Hv,dk)
  b.dg = Tensor::empty({d.B, d.T, d.Hv}, DType::F32, dev);         // (B,T,Hv)
  b.dbeta = Tensor::empty({d.B, d.T, d.Hv}, DType::F32, dev);      // (B,T,Hv)
  const gdn::Work<E> ws = b.work<E>();
  cudaStream_t s = stream_of(ex);
  const E* dO = static_cast<const E*>(dout.raw());
  gdn::launch_prep(d, in, ws, s);
  gdn::launch_state_fwd(d, in, ws, static_cast<E*>(nullptr), s);
  gdn::launch_state_bwd(d, in, dO, ws, s);
  gdn::launch_bwd_dqk(d, in, dO, ws, s);
  gdn::launch_bwd_wy(d, in, ws, static_cast<E*>(dv.raw()), s);
  const int64_t rows = d.B * d.T * d.Hk;
  constexpr int kRowsPerBlock = 8;
  auto qk = gdn_qk_grad_kernel;
  qk<<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0, s>>>(
      dq.raw(), dk.raw(), q.raw(), k.raw(), dt, ws.dqn, ws.dkn, rows, d.Hk, d.Hv, d.dk);
  check_launch("gdn_qk_grad_kernel");
  auto gate = gdn_gate_grad_kernel;
  gate<<<unsigned(d.Hv), kGateThreads, 0, s>>>(dalpha.raw(), dbeta_raw.raw(), dA_log.data<float>(),
                                               ddt_bias.data<float>(), alpha.raw(), beta_raw.raw(), dt, in.A_log,
                                               in.dt_bias, ws.dg, ws.dbeta, d.B * d.T, d.Hv);
  check_launch("gdn_gate_grad_kernel");
}

void check_args(const char* op, const Tensor& q, const Tensor& v, const Tensor& A_log, const Tensor& dt_bias) {
  HYTRA_CHECK(q.dtype() == DType::F32 || q.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", q.desc());
  HYTRA_CHECK(A_log.dtype() == DType::F32 && dt_bias.dtype() == DType::F32, op,
              " on CUDA: A_log and dt_bias must be fp32, got ", A_log.desc(), ", ", dt_bias.desc());
  HYTRA_CHECK(q.size(3) <= kMaxHeadDim && v.size(3) <= kMaxHeadDim, op, " on CUDA: head dims dk = ", q.size(3),
              ", dv = ", v.size(3), " (at most ", kMaxHeadDim, ")");
  HYTRA_CHECK(q.size(0) * v.size(2) * (q.size(1) / 32 + 1) < (int64_t(1) << 31), op, " on CUDA: B*Hv*T too large");
}

}  // namespace

void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
                          const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t) {
  check_args("gated_delta_rule_fwd", q, v, A_log, dt_bias);
  if (q.size(0) == 0 || q.size(1) == 0 || v.size(2) == 0 || v.size(3) == 0) return;
  if (q.dtype() == DType::BF16)
    run_fwd<bf16>(ex, o, q, k, v, alpha, beta_raw, A_log, dt_bias);
  else
    run_fwd<float>(ex, o, q, k, v, alpha, beta_raw, A_log, dt_bias);
}

void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw,
                          Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log,
                          const Tensor& dt_bias, int64_t) {
  const char* op = "gated_delta_rule_bwd";
  check_args(op, q, v, A_log, dt_bias);
  HYTRA_CHECK(dA_log.dtype() == DType::F32 && ddt_bias.dtype() == DType::F32, op,
              " on CUDA: dA_log and ddt_bias must be fp32");
  if (q.size(0) == 0 || q.size(1) == 0 || v.size(2) == 0) return;
  if (q.dtype() == DType::BF16)
    run_bwd<bf16>(ex, dq, dk, dv, dalpha, dbeta_raw, dA_log, ddt_bias, dout, q, k, v, alpha, beta_raw, A_log, dt_bias);
  else
    run_bwd<float>(ex, dq, dk, dv, dalpha, dbeta_raw, dA_log, ddt_bias, dout, q, k, v, alpha, beta_raw, A_log, dt_bias);
}

}  // namespace hytra::cuda
