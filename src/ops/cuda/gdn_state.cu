// Chunked gated delta rule, the sequential passes over chunks (formulas in gdn_chunk.cuh). One block
// per (b, value head, kVT value rows of the state); rows of the state never interact, so each block
// carries its (kVT, dkp) slice of S (or dS) in fp32 through the chunks, with a copy in E as the
// tensor-core operand.
// Forward, chunk by chunk: Vn = U - W S^T; o = diag(eq rq) Q S^T + P Vn (or, for the backward, S0
// and Vn saved instead of o); S = e^gamL S + (diag(ed rk) Vn)^T K.
// Backward, last chunk first, dS the gradient of the state leaving the chunk (0 after the last):
//   dVn = P^T dO + diag(ed rk) K dS^T,
//   dS <- e^gamL dS + (diag(eq rq) dO)^T Q - dVn^T W      (the gradient of the state entering it);
// dS and dVn are saved for the per-chunk gradient kernels. Products that do not depend on each other
// start on different warps (block_gemm_from) and run side by side.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 256;

template <class E>
struct StateSmem {
  static constexpr int C = kChunk<E>;
  float* s32;    // (kVT, dkp + 4): S or dS
  E* sb;         // (kVT, dkp + kRowPad): its E copy
  E* k;          // (C, dkp + kRowPad) raw rows
  E* q;          // (C, dkp + kRowPad) raw rows
  E* w;          // (C, dkp + kRowPad)
  E* p;          // (C, C + kRowPad)
  E* x;          // (C, kVT + kRowPad): U (forward) or dO (backward) columns of this block
  E* y;          // (C, kVT + kRowPad): Vn (forward) or scaled dO (backward)
  E* z;          // (C, kVT + kRowPad): scaled Vn (forward) or -dVn (backward)
  float* acc;    // (C, kVT): the first of two products into one result
  float* gates;  // (kGates, C)
  size_t bytes;
  __host__ __device__ StateSmem(uintptr_t base, const Dims& d) {
    SmemCarver sc{base};
    s32 = sc.take<float>(size_t(kVT) * (d.dkp + 4));
    sb = sc.take<E>(size_t(kVT) * (d.dkp + kRowPad));
    k = sc.take<E>(size_t(C) * (d.dkp + kRowPad));
    q = sc.take<E>(size_t(C) * (d.dkp + kRowPad));
    w = sc.take<E>(size_t(C) * (d.dkp + kRowPad));
    p = sc.take<E>(size_t(C) * (C + kRowPad));
    x = sc.take<E>(size_t(C) * (kVT + kRowPad));
    y = sc.take<E>(size_t(C) * (kVT + kRowPad));
    z = sc.take<E>(size_t(C) * (kVT + kRowPad));
    acc = sc.take<float>(size_t(C) * kVT);
    gates = sc.take<float>(kGates * C);
    bytes = sc.off;
  }
};

// Zero state and, when dst is not null, zeros into dst's (kVT, dkp) slice: the state entering the
// first chunk.
template <class E>
__device__ void zero_state(const StateSmem<E>& s, const Dims& d, E* dst) {
  for (int i = threadIdx.x; i < kVT * (d.dkp + 4); i += blockDim.x) s.s32[i] = 0.0f;
  for (int i = threadIdx.x; i < kVT * (d.dkp + kRowPad); i += blockDim.x) s.sb[i] = from_float<E>(0.0f);
  for (int i = threadIdx.x; dst != nullptr && i < kVT * d.dkp / 2; i += blockDim.x) store2(dst + 2 * i, 0.0f, 0.0f);
}

// S (or dS) = decay S + acc, also into its E copy and, when dst is not null, into dst (row stride dkp).
template <class E>
__device__ __forceinline__ void update_state(const StateSmem<E>& s, const Dims& d, float decay, E* dst, int v, int n,
                                             float a0, float a1) {
  float* sp = s.s32 + v * (d.dkp + 4) + n;
  const float2 old = load2(sp);
  const float x0 = decay * old.x + a0, x1 = decay * old.y + a1;
  store2(sp, x0, x1);
  store2(s.sb + v * (d.dkp + kRowPad) + n, x0, x1);
  if (dst != nullptr) store2(dst + v * d.dkp + n, x0, x1);
}

// o != null: the forward; else the backward's recompute (saves S0 and Vn).
template <class E>
__global__ void __launch_bounds__(kThreads) gdn_state_fwd_kernel(Dims d, Inputs<E> in, Work<E> ws, E* o) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const StateSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const int nvt = d.dvp / kVT, v0 = int(blockIdx.x % nvt) * kVT;
  const int64_t bh = blockIdx.x / nvt;
  const int ldk = d.dkp + kRowPad, ldt = kVT + kRowPad, ldc = C + kRowPad;
  const float *gam = s.gates + kGam * C, *rq = s.gates + kRq * C, *rk = s.gates + kRk * C;
  const float *ed = s.gates + kEd * C, *eq = s.gates + kEq * C;
  const bool save = o == nullptr;
  auto s0_of = [&](int c) { return ws.s0 + ((bh * d.nc + c) * d.dvp + v0) * d.dkp; };
  // Chunk c's tiles; W, U and Q are dead after the first half of a chunk's work, K, P and the gates
  // after the second, so each group loads during the other's half.
  auto load_wuq = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    stage_tile(s.w, ldk, ws.w + cp.bhc * C * d.dkp, d.dkp, C, d.dkp, C, d.dkp);
    stage_tile(s.x, ldt, ws.u + cp.bhc * C * d.dvp + v0, d.dvp, C, kVT, C, kVT);
    if (!save) stage_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
  };
  auto load_kpg = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    stage_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
    if (!save) stage_tile(s.p, ldc, ws.p + cp.bhc * C * C, C, C, C, C, C);
    load_gates(s.gates, ws, cp.bhc);
  };
  zero_state(s, d, save ? s0_of(0) : nullptr);
  load_wuq(0);
  load_kpg(0);
  for (int c = 0; c < d.nc; ++c) {
    const ChunkPos<E> cp(d, bh, c);
    const int L = cp.L;
    tiles_ready();
    const float decay = expf(gam[C - 1]);
    E* vn = ws.vn + cp.bhc * C * d.dvp + v0;
    block_gemm(
        C, kVT,
        [&](int i, int v, float a0, float a1) {
          const float x0 = i < L ? to_float(s.x[i * ldt + v]) - a0 : 0.0f;
          const float x1 = i < L ? to_float(s.x[i * ldt + v + 1]) - a1 : 0.0f;
          const float f = ed[i] * rk[i];
          store2(s.y + i * ldt + v, x0, x1);
          store2(s.z + i * ldt + v, x0 * f, x1 * f);
          if (save) store2(vn + i * d.dvp + v, x0, x1);
        },
        mm<false, false>(s.w, ldk, s.sb, ldk, d.dkp));
    if (!save)
      block_gemm_from(
          4, C, kVT,
          [&](int i, int v, float a0, float a1) {
            const float f = eq[i] * rq[i];
            store2(s.acc + i * kVT + v, a0 * f, a1 * f);
          },
          mm<false, false>(s.q, ldk, s.sb, ldk, d.dkp));
    __syncthreads();
    if (c + 1 < d.nc) load_wuq(c + 1);
    if (!save)
      block_gemm(
          C, kVT,
          [&](int i, int v, float a0, float a1) {
            if (i < L)
              store_pair_in_row(o + cp.v_off(d) + int64_t(i) * d.Hv * d.dv + v0, v, d.dv - v0, s.acc[i * kVT + v] + a0,
                                s.acc[i * kVT + v + 1] + a1);
          },
          mm<false, true>(s.p, ldc, s.y, ldt, C));
    E* next = save && c + 1 < d.nc ? s0_of(c + 1) : nullptr;
    block_gemm_from(
        4, kVT, d.dkp, [&](int v, int n, float a0, float a1) { update_state(s, d, decay, next, v, n, a0, a1); },
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
  const int ldk = d.dkp + kRowPad, ldt = kVT + kRowPad, ldc = C + kRowPad;
  const float *gam = s.gates + kGam * C, *rq = s.gates + kRq * C, *rk = s.gates + kRk * C;
  const float *ed = s.gates + kEd * C, *eq = s.gates + kEq * C;
  auto ds_of = [&](int c) { return ws.ds + ((bh * d.nc + c) * d.dvp + v0) * d.dkp; };
  // Chunk c's tiles; P and dO are dead after the first third of a chunk's work, K, Q, W and the
  // gates after the last, so P and dO load during the rest.
  auto load_pd = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    stage_tile(s.p, ldc, ws.p + cp.bhc * C * C, C, C, C, C, C);
    stage_tile(s.x, ldt, dout + cp.v_off(d) + v0, int64_t(d.Hv) * d.dv, C, kVT, cp.L, d.dv - v0);
  };
  auto load_kqwg = [&](int c) {
    const ChunkPos<E> cp(d, bh, c);
    stage_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
    stage_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, cp.L, d.dk);
    stage_tile(s.w, ldk, ws.w + cp.bhc * C * d.dkp, d.dkp, C, d.dkp, C, d.dkp);
    load_gates(s.gates, ws, cp.bhc);
  };
  zero_state(s, d, ds_of(d.nc - 1));
  load_pd(d.nc - 1);
  load_kqwg(d.nc - 1);
  for (int c = d.nc - 1; c >= 0; --c) {
    const ChunkPos<E> cp(d, bh, c);
    const int L = cp.L;
    tiles_ready();
    const float decay = expf(gam[C - 1]);
    for (int idx = threadIdx.x; idx < C * kVT / 2; idx += blockDim.x) {
      const int i = idx / (kVT / 2), v = 2 * (idx % (kVT / 2));
      const float f = eq[i] * rq[i];
      store2(s.y + i * ldt + v, to_float(s.x[i * ldt + v]) * f, to_float(s.x[i * ldt + v + 1]) * f);
    }
    block_gemm(
        C, kVT, [&](int j, int v, float a0, float a1) { store2(s.acc + j * kVT + v, a0, a1); },
        mm<true, true>(s.p, ldc, s.x, ldt, C));
    __syncthreads();
    if (c > 0) load_pd(c - 1);
    E* dvn = ws.dvn + cp.bhc * C * d.dvp + v0;
    block_gemm(
        C, kVT,
        [&](int j, int v, float a0, float a1) {
          const float f = ed[j] * rk[j];
          const float x0 = j < L ? s.acc[j * kVT + v] + f * a0 : 0.0f;
          const float x1 = j < L ? s.acc[j * kVT + v + 1] + f * a1 : 0.0f;
          store2(dvn + j * d.dvp + v, x0, x1);
          store2(s.z + j * ldt + v, -x0, -x1);
        },
        mm<false, false>(s.k, ldk, s.sb, ldk, d.dkp));
    __syncthreads();
    E* next = c > 0 ? ds_of(c - 1) : nullptr;
    block_gemm(
        kVT, d.dkp, [&](int v, int n, float a0, float a1) { update_state(s, d, decay, next, v, n, a0, a1); },
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
