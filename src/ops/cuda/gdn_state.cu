// Chunked gated delta rule, the sequential passes over chunks (formulas in gdn_chunk.cuh). One block
// per (b, value head, kVT value rows of the state); rows of the state never interact, so each block
// carries its (kVT, dkp) slice of S (or dS) in fp32 through the chunks, with a copy in E as the
// tensor-core operand.
// Forward, chunk by chunk: Vn = U - W S^T; o = diag(scale e^gam rq) Q S^T + P Vn (or, for the
// backward, S0 and Vn saved instead of o); S = e^gamL S + (diag(e^(gamL - gam) rk) Vn)^T K.
// Backward, last chunk first, dS the gradient of the state leaving the chunk (0 after the last):
//   dVn = P^T dO + diag(e^(gamL - gam) rk) K dS^T,
//   dS <- e^gamL dS + (diag(scale e^gam rq) dO)^T Q - dVn^T W      (the gradient of the state entering it);
// dS (before the update) and dVn are saved for the per-chunk gradient kernels.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 128;

template <class E>
struct StateSmem {
  static constexpr int C = kChunk<E>;
  float* s32;    // (kVT, dkp): S or dS
  E* sb;         // (kVT, dkp + kPad): its E copy
  E* k;          // (C, dkp + kPad) raw rows
  E* q;          // (C, dkp + kPad) raw rows
  E* w;          // (C, dkp + kPad)
  E* p;          // (C, C + kPad)
  E* x;          // (C, kVT + kPad): U (forward) or dO (backward) columns of this block
  E* y;          // (C, kVT + kPad): Vn (forward) or scaled dO (backward)
  E* z;          // (C, kVT + kPad): scaled Vn (forward) or -dVn (backward)
  float* acc;    // (C, kVT): the first of two products into one result
  float* gates;  // (4, C)
  size_t bytes;
  __host__ __device__ StateSmem(uintptr_t base, const Dims& d) {
    SmemCarver sc{base};
    s32 = sc.take<float>(size_t(kVT) * d.dkp);
    sb = sc.take<E>(size_t(kVT) * (d.dkp + kPad));
    k = sc.take<E>(size_t(C) * (d.dkp + kPad));
    q = sc.take<E>(size_t(C) * (d.dkp + kPad));
    w = sc.take<E>(size_t(C) * (d.dkp + kPad));
    p = sc.take<E>(size_t(C) * (C + kPad));
    x = sc.take<E>(size_t(C) * (kVT + kPad));
    y = sc.take<E>(size_t(C) * (kVT + kPad));
    z = sc.take<E>(size_t(C) * (kVT + kPad));
    acc = sc.take<float>(size_t(C) * kVT);
    gates = sc.take<float>(4 * C);
    bytes = sc.off;
  }
};

template <class E>
__device__ void zero_state(const StateSmem<E>& s, const Dims& d) {
  for (int i = threadIdx.x; i < kVT * d.dkp; i += blockDim.x) s.s32[i] = 0.0f;
  for (int i = threadIdx.x; i < kVT * (d.dkp + kPad); i += blockDim.x) s.sb[i] = from_f<E>(0.0f);
}

// o != null: the forward; else the backward's recompute (saves S0 and Vn).
template <class E>
__global__ void __launch_bounds__(kThreads) gdn_state_fwd_kernel(Dims d, Inputs<E> in, Work<E> ws, E* o) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const StateSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const int nvt = d.dvp / kVT, v0 = int(blockIdx.x % nvt) * kVT;
  const int64_t bh = blockIdx.x / nvt;
  const int ldk = d.dkp + kPad, ldt = kVT + kPad, ldc = C + kPad;
  const float *gam = s.gates, *rq = s.gates + 2 * C, *rk = s.gates + 3 * C;
  const bool save = o == nullptr;
  // Chunk c's tiles; W, U and Q are dead after the first half of a chunk's work, K, P and the gates
  // after the second, so each group loads during the other's half.
  auto load_wuq = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    load_tile(s.w, ldk, ws.w + cp.bhc * C * d.dkp, d.dkp, C, d.dkp, C, d.dkp);
    load_tile(s.x, ldt, ws.u + cp.bhc * C * d.dvp + v0, d.dvp, C, kVT, C, kVT);
    if (!save) load_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
  };
  auto load_kpg = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    load_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
    if (!save) load_tile(s.p, ldc, ws.p + cp.bhc * C * C, C, C, C, C, C);
    load_gates(s.gates, ws, cp.bhc);
  };
  zero_state(s, d);
  load_wuq(0);
  load_kpg(0);
  for (int c = 0; c < d.nc; ++c) {
    const ChunkPos<E> cp(d, bh, c);
    const int L = cp.L;
    tiles_ready();
    if (save) {
      E* s0 = ws.s0 + (cp.bhc * d.dvp + v0) * d.dkp;
      for (int i = threadIdx.x; i < kVT * d.dkp; i += blockDim.x) s0[i] = s.sb[i / d.dkp * ldk + i % d.dkp];
    }
    const float gl = gam[C - 1], decay = expf(gl);
    E* vn = ws.vn + cp.bhc * C * d.dvp + v0;
    block_gemm(
        C, kVT,
        [&](int i, int v, float acc) {
          const float x = i < L ? to_f(s.x[i * ldt + v]) - acc : 0.0f;
          s.y[i * ldt + v] = from_f<E>(x);
          s.z[i * ldt + v] = from_f<E>(x * expf(gl - gam[i]) * rk[i]);
          if (save) vn[i * d.dvp + v] = from_f<E>(x);
        },
        mm<false, false>(s.w, ldk, s.sb, ldk, d.dkp));
    if (!save)
      block_gemm(
          C, kVT, [&](int i, int v, float acc) { s.acc[i * kVT + v] = acc * d.scale * expf(gam[i]) * rq[i]; },
          mm<false, false>(s.q, ldk, s.sb, ldk, d.dkp));
    __syncthreads();
    if (c + 1 < d.nc) load_wuq(c + 1);
    if (!save)
      block_gemm(
          C, kVT,
          [&](int i, int v, float acc) {
            if (i < L && v0 + v < d.dv)
              o[cp.v_off(d) + int64_t(i) * d.Hv * d.dv + v0 + v] = from_f<E>(s.acc[i * kVT + v] + acc);
          },
          mm<false, true>(s.p, ldc, s.y, ldt, C));
    block_gemm(
        kVT, d.dkp,
        [&](int v, int n, float acc) {
          const float x = decay * s.s32[v * d.dkp + n] + acc;
          s.s32[v * d.dkp + n] = x;
          s.sb[v * ldk + n] = from_f<E>(x);
        },
        mm<true, true>(s.z, ldt, s.k, ldk, C));
    __syncthreads();
    if (c + 1 < d.nc) load_kpg(c + 1);
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) gdn_state_bwd_kernel(Dims d, Inputs<E> in, const E* dout, Work<E> ws) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const StateSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const int nvt = d.dvp / kVT, v0 = int(blockIdx.x % nvt) * kVT;
  const int64_t bh = blockIdx.x / nvt;
  const int ldk = d.dkp + kPad, ldt = kVT + kPad, ldc = C + kPad;
  const float *gam = s.gates, *rq = s.gates + 2 * C, *rk = s.gates + 3 * C;
  // Chunk c's tiles; P and dO are dead after the first third of a chunk's work, K, Q, W and the
  // gates after the last, so P and dO load during the rest.
  auto load_pd = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    load_tile(s.p, ldc, ws.p + cp.bhc * C * C, C, C, C, C, C);
    load_tile(s.x, ldt, dout + cp.v_off(d) + v0, int64_t(d.Hv) * d.dv, C, kVT, cp.L, d.dv - v0);
  };
  auto load_kqwg = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    load_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
    load_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
    load_tile(s.w, ldk, ws.w + cp.bhc * C * d.dkp, d.dkp, C, d.dkp, C, d.dkp);
    load_gates(s.gates, ws, cp.bhc);
  };
  zero_state(s, d);
  load_pd(d.nc - 1);
  load_kqwg(d.nc - 1);
  for (int c = d.nc - 1; c >= 0; --c) {
    const ChunkPos<E> cp(d, bh, c);
    const int L = cp.L;
    tiles_ready();
    E* ds = ws.ds + (cp.bhc * d.dvp + v0) * d.dkp;
    for (int i = threadIdx.x; i < kVT * d.dkp; i += blockDim.x) ds[i] = s.sb[i / d.dkp * ldk + i % d.dkp];
    const float gl = gam[C - 1], decay = expf(gl);
    for (int idx = threadIdx.x; idx < C * kVT; idx += blockDim.x) {
      const int i = idx / kVT, v = idx % kVT;
      s.y[i * ldt + v] = from_f<E>(to_f(s.x[i * ldt + v]) * d.scale * expf(gam[i]) * rq[i]);
    }
    block_gemm(
        C, kVT, [&](int j, int v, float acc) { s.acc[j * kVT + v] = acc; }, mm<true, true>(s.p, ldc, s.x, ldt, C));
    __syncthreads();
    if (c > 0) load_pd(c - 1);
    E* dvn = ws.dvn + cp.bhc * C * d.dvp + v0;
    block_gemm(
        C, kVT,
        [&](int j, int v, float acc) {
          const float x = j < L ? s.acc[j * kVT + v] + expf(gl - gam[j]) * rk[j] * acc : 0.0f;
          dvn[j * d.dvp + v] = from_f<E>(x);
          s.z[j * ldt + v] = from_f<E>(-x);
        },
        mm<false, false>(s.k, ldk, s.sb, ldk, d.dkp));
    __syncthreads();
    block_gemm(
        kVT, d.dkp,
        [&](int v, int n, float acc) {
          const float x = decay * s.s32[v * d.dkp + n] + acc;
          s.s32[v * d.dkp + n] = x;
          s.sb[v * ldk + n] = from_f<E>(x);
        },
        mm<true, true>(s.y, ldt, s.q, ldk, C), mm<true, true>(s.z, ldt, s.w, ldk, C));
    __syncthreads();
    if (c > 0) load_kqwg(c - 1);
  }
}

}  // namespace

template <class E>
void launch_state_fwd(const Dims& d, const Inputs<E>& in, const Work<E>& ws, E* o, cudaStream_t s) {
  const size_t smem = StateSmem<E>(0, d).bytes;
  auto kern = gdn_state_fwd_kernel<E>;
  allow_smem(kern, smem, "gdn_state_fwd_kernel smem");
  kern<<<unsigned(d.B * d.Hv * (d.dvp / kVT)), kThreads, smem, s>>>(d, in, ws, o);
  check_launch("gdn_state_fwd_kernel");
}

template <class E>
void launch_state_bwd(const Dims& d, const Inputs<E>& in, const E* dout, const Work<E>& ws, cudaStream_t s) {
  const size_t smem = StateSmem<E>(0, d).bytes;
  auto kern = gdn_state_bwd_kernel<E>;
  allow_smem(kern, smem, "gdn_state_bwd_kernel smem");
  kern<<<unsigned(d.B * d.Hv * (d.dvp / kVT)), kThreads, smem, s>>>(d, in, dout, ws);
  check_launch("gdn_state_bwd_kernel");
}

template void launch_state_fwd<float>(const Dims&, const Inputs<float>&, const Work<float>&, float*, cudaStream_t);
template void launch_state_fwd<bf16>(const Dims&, const Inputs<bf16>&, const Work<bf16>&, bf16*, cudaStream_t);
template void launch_state_bwd<float>(const Dims&, const Inputs<float>&, const float*, const Work<float>&,
                                      cudaStream_t);
template void launch_state_bwd<bf16>(const Dims&, const Inputs<bf16>&, const bf16*, const Work<bf16>&, cudaStream_t);

}  // namespace hytra::cuda::gdn
