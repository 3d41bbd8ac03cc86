// Chunked gated delta rule backward, the gradients that need the chunk's states (formulas in
// gdn_chunk.cuh; S0 entering, dS the gradient of the state leaving, Vn, dVn from gdn_state.cu).
// One block per (b, value head, chunk); qn = rq q, kn = rk k:
//   X1 = diag(eq) dO S0,  dP = dO Vn^T,  dPm = lower(scale e^(gam_i - gam_j) dP)
//   dqn = X1 + dPm Kn;   dkn = dPm^T Qn + diag(ed) Vn dS   (gdn_bwd_wy.cu adds the rest)
//   dW = -dVn S0
//   dgam_i = qn_i.X1_i + sum_j Z_ij - sum_j Z_ji - c_i  (Z = P o dP, c_j = ed_j kn_j.(Vn dS)_j),
//   and the last step also gets sum_j c_j + e^gamL <dS, S0>.
// The products over dv run in kVS-column slices (accumulated in fp32 shared memory), so the states
// never sit in shared memory whole; the next slice loads while one is multiplied (two buffers).
// Row sums take four threads per row, added in a fixed order.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 512;

template <class E>
struct DqkSmem {
  static constexpr int C = kChunk<E>;
  float* x1;  // (C, dkp + 4): X1, then the dkn part
  float* x2;  // dP (C, C + 4), then Vn dS (C, dkp + 4)
  float* x3;  // (C, dkp + 4): dVn S0
  E* k;       // (C, dkp + kRowPad) raw rows
  // Operands of one phase at a time:
  E* sa[2];      // slices (C, kVS + kRowPad): dO | Vn
  E* sb[2];      // slices (C, kVS + kRowPad): Vn | dVn
  E* sc[2];      // slices (kVS, dkp + kRowPad): S0 | dS
  E* sd[2];      // slice (kVS, dkp + kRowPad): - | S0
  E* q;          // (C, dkp + kRowPad) raw rows
  E* p;          // (C, C + kRowPad)
  E* pq;         // (C, C + kRowPad): dPm diag(rk)
  E* pk;         // (C, C + kRowPad): diag(rq) dPm
  float* gates;  // (kGates, C)
  float* part;   // (3, 4, C): four partial row sums each
  float* sums;   // (4, C): qn.X1, row sums of Z, column sums of Z, c
  float* red;    // (32)
  size_t bytes;
  __host__ __device__ DqkSmem(uintptr_t base, const Dims& d) {
    SmemCarver c{base};
    const size_t acc = size_t(C) * (d.dkp + 4);
    x1 = c.take<float>(acc);
    x2 = c.take<float>(acc > size_t(C) * (C + 4) ? acc : size_t(C) * (C + 4));
    x3 = c.take<float>(acc);
    k = c.take<E>(size_t(C) * (d.dkp + kRowPad));
    const size_t ops = c.off;  // the phases' operands share what follows
    for (int b = 0; b < 2; ++b) {
      sa[b] = c.take<E>(size_t(C) * (kVS + kRowPad));
      sb[b] = c.take<E>(size_t(C) * (kVS + kRowPad));
      sc[b] = c.take<E>(size_t(kVS) * (d.dkp + kRowPad));
      sd[b] = c.take<E>(size_t(kVS) * (d.dkp + kRowPad));
    }
    const size_t slices_end = c.off;
    c.off = ops;
    q = c.take<E>(size_t(C) * (d.dkp + kRowPad));
    p = c.take<E>(size_t(C) * (C + kRowPad));
    pq = c.take<E>(size_t(C) * (C + kRowPad));
    pk = c.take<E>(size_t(C) * (C + kRowPad));
    if (c.off < slices_end) c.off = slices_end;
    gates = c.take<float>(kGates * C);
    part = c.take<float>(12 * C);
    sums = c.take<float>(4 * C);
    red = c.take<float>(32);
    bytes = c.off;
  }
};

__device__ __forceinline__ float sum4(const float* p) { return (p[0] + p[1]) + (p[2] + p[3]); }

// acc (+)= (a0, a1) at p: the first slice stores, the others add.
__device__ __forceinline__ void accumulate2(float* p, bool first, float a0, float a1) {
  if (first) {
    store2(p, a0, a1);
  } else {
    const float2 o = load2(p);
    store2(p, o.x + a0, o.y + a1);
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) gdn_bwd_dqk_kernel(Dims d, Inputs<E> in, const E* dout, Work<E> ws) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const DqkSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const ChunkPos<E> cp(d, blockIdx.x / d.nc, int(blockIdx.x % d.nc));
  const int L = cp.L, ldk = d.dkp + kRowPad, lds = kVS + kRowPad, ldc = C + kRowPad, lda = d.dkp + 4, ldp = C + 4;
  const float *gam = s.gates + kGam * C, *rq = s.gates + kRq * C, *rk = s.gates + kRk * C;
  const float *ed = s.gates + kEd * C, *eq = s.gates + kEq * C;
  float *t1 = s.sums, *rowz = s.sums + C, *colz = s.sums + 2 * C, *c3 = s.sums + 3 * C;
  const E* s0 = ws.s0 + cp.bhc * d.dvp * d.dkp;
  const E* vn = ws.vn + cp.bhc * C * d.dvp;
  load_gates(s.gates, ws, cp.bhc);

  // dO S0 and dO Vn^T over dv slices.
  auto load1 = [&](int vs, int b) {
    stage_tile(s.sa[b], lds, dout + cp.v_off(d) + vs, int64_t(d.Hv) * d.dv, C, kVS, L, d.dv - vs);
    stage_tile(s.sb[b], lds, vn + vs, d.dvp, C, kVS, C, kVS);
    stage_tile(s.sc[b], ldk, s0 + int64_t(vs) * d.dkp, d.dkp, kVS, d.dkp, kVS, d.dkp);
  };
  load1(0, 0);
  cp_async_commit();
  for (int vs = 0, b = 0; vs < d.dvp; vs += kVS, b ^= 1) {
    if (vs + kVS < d.dvp) load1(vs + kVS, b ^ 1);
    cp_async_commit();
    tiles_ready_but_latest();
    const bool first = vs == 0;
    block_gemm(
        C, d.dkp, [&](int i, int n, float a0, float a1) { accumulate2(s.x1 + i * lda + n, first, a0, a1); },
        mm<false, true>(s.sa[b], lds, s.sc[b], ldk, kVS));
    block_gemm_from(
        8, C, C, [&](int i, int j, float a0, float a1) { accumulate2(s.x2 + i * ldp + j, first, a0, a1); },
        mm<false, false>(s.sa[b], lds, s.sb[b], lds, kVS));
    __syncthreads();
  }

  stage_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  stage_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  stage_tile(s.p, ldc, ws.p + cp.bhc * C * C, C, C, C, C, C);
  tiles_ready();
  for (int idx = threadIdx.x; idx < 4 * C; idx += blockDim.x) {  // X1 scaled; qn.X1; Z's row and column sums
    const int i = idx / 4, part = idx % 4;
    const float xs = i < L ? eq[i] : 0.0f;
    float qx = 0.0f, z = 0.0f, zc = 0.0f;
    for (int n = part; n < d.dkp; n += 4) {
      const float x = s.x1[i * lda + n] * xs;
      s.x1[i * lda + n] = x;
      qx += to_float(s.q[i * ldk + n]) * x;
    }
    for (int j = part; j <= i && i < L; j += 4) z += to_float(s.p[i * ldc + j]) * s.x2[i * ldp + j];
    for (int r = i + part; r < L; r += 4) zc += to_float(s.p[r * ldc + i]) * s.x2[r * ldp + i];
    s.part[idx] = qx;
    s.part[4 * C + idx] = z;
    s.part[8 * C + idx] = zc;
  }
  for (int idx = threadIdx.x; idx < C * C / 2; idx += blockDim.x) {
    const int i = idx / (C / 2), j = 2 * (idx % (C / 2));
    const float f = i < L ? d.scale : 0.0f;
    const float m0 = j <= i ? f * expf(gam[i] - gam[j]) * s.x2[i * ldp + j] : 0.0f;
    const float m1 = j + 1 <= i ? f * expf(gam[i] - gam[j + 1]) * s.x2[i * ldp + j + 1] : 0.0f;
    store2(s.pq + i * ldc + j, m0 * rk[j], m1 * rk[j + 1]);
    store2(s.pk + i * ldc + j, m0 * rq[i], m1 * rq[i]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    t1[i] = rq[i] * sum4(s.part + 4 * i);
    rowz[i] = sum4(s.part + 4 * C + 4 * i);
    colz[i] = sum4(s.part + 8 * C + 4 * i);
  }
  block_gemm(
      C, d.dkp,
      [&](int i, int n, float a0, float a1) {
        if (i < L)
          store_pair_in_row(ws.dqn + cp.head_off(d, i), n, d.dk, s.x1[i * lda + n] + a0, s.x1[i * lda + n + 1] + a1);
      },
      mm<false, true>(s.pq, ldc, s.k, ldk, C));
  __syncthreads();
  block_gemm(
      C, d.dkp, [&](int j, int n, float a0, float a1) { store2(s.x1 + j * lda + n, a0, a1); },
      mm<true, true>(s.pk, ldc, s.q, ldk, C));
  __syncthreads();

  // Vn dS and dVn S0 over dv slices; <dS, S0>.
  const E* ds = ws.ds + cp.bhc * d.dvp * d.dkp;
  const E* dvn = ws.dvn + cp.bhc * C * d.dvp;
  float dot = 0.0f;
  auto load3 = [&](int vs, int b) {
    stage_tile(s.sa[b], lds, vn + vs, d.dvp, C, kVS, C, kVS);
    stage_tile(s.sb[b], lds, dvn + vs, d.dvp, C, kVS, C, kVS);
    stage_tile(s.sc[b], ldk, ds + int64_t(vs) * d.dkp, d.dkp, kVS, d.dkp, kVS, d.dkp);
    stage_tile(s.sd[b], ldk, s0 + int64_t(vs) * d.dkp, d.dkp, kVS, d.dkp, kVS, d.dkp);
  };
  load3(0, 0);
  cp_async_commit();
  for (int vs = 0, b = 0; vs < d.dvp; vs += kVS, b ^= 1) {
    if (vs + kVS < d.dvp) load3(vs + kVS, b ^ 1);
    cp_async_commit();
    tiles_ready_but_latest();
    const bool first = vs == 0;
    block_gemm(
        C, d.dkp, [&](int i, int n, float a0, float a1) { accumulate2(s.x2 + i * lda + n, first, a0, a1); },
        mm<false, true>(s.sa[b], lds, s.sc[b], ldk, kVS));
    block_gemm_from(
        8, C, d.dkp, [&](int i, int n, float a0, float a1) { accumulate2(s.x3 + i * lda + n, first, a0, a1); },
        mm<false, true>(s.sb[b], lds, s.sd[b], ldk, kVS));
    for (int idx = threadIdx.x; idx < kVS * d.dkp; idx += blockDim.x) {
      const int r = idx / d.dkp, n = idx % d.dkp;
      dot += to_float(s.sc[b][r * ldk + n]) * to_float(s.sd[b][r * ldk + n]);
    }
    __syncthreads();
  }
  dot = block_sum(dot, s.red);

  for (int idx = threadIdx.x; idx < 4 * C; idx += blockDim.x) {
    const int j = idx / 4;
    float x = 0.0f;
    for (int n = idx % 4; n < d.dk && j < L; n += 4) x += to_float(s.k[j * ldk + n]) * s.x2[j * lda + n];
    s.part[idx] = x;
  }
  E* dw = ws.dw + cp.bhc * C * d.dkp;
  for (int idx = threadIdx.x; idx < C * d.dkp / 2; idx += blockDim.x) {
    const int j = idx / (d.dkp / 2), n = 2 * (idx % (d.dkp / 2));
    const float e = ed[j];
    if (j < L)
      store_pair_in_row(ws.dkn + cp.head_off(d, j), n, d.dk, s.x1[j * lda + n] + e * s.x2[j * lda + n],
                        s.x1[j * lda + n + 1] + e * s.x2[j * lda + n + 1]);
    store2(dw + j * d.dkp + n, -s.x3[j * lda + n], -s.x3[j * lda + n + 1]);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < C; j += blockDim.x) c3[j] = j < L ? ed[j] * rk[j] * sum4(s.part + 4 * j) : 0.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum_c = 0.0f;
    for (int j = 0; j < L; ++j) sum_c += c3[j];
    for (int i = 0; i < C; ++i) {
      float g = i < L ? t1[i] + rowz[i] - colz[i] - c3[i] : 0.0f;
      if (i == L - 1) g += sum_c + expf(gam[C - 1]) * dot;
      ws.dgam[cp.bhc * C + i] = g;
    }
  }
}

}  // namespace

template <class E>
void launch_bwd_dqk(const Dims& d, const Inputs<E>& in, const E* dout, const Work<E>& ws, cudaStream_t s) {
  const size_t smem = DqkSmem<E>(0, d).bytes;
  auto kern = gdn_bwd_dqk_kernel<E>;
  allow_smem(kern, smem, "gdn_bwd_dqk_kernel smem");
  kern<<<unsigned(d.B * d.Hv * d.nc), kThreads, smem, s>>>(d, in, dout, ws);
  check_launch("gdn_bwd_dqk_kernel");
}

template void launch_bwd_dqk<float>(const Dims&, const Inputs<float>&, const float*, const Work<float>&, cudaStream_t);
template void launch_bwd_dqk<bf16>(const Dims&, const Inputs<bf16>&, const bf16*, const Work<bf16>&, cudaStream_t);

}  // namespace hytra::cuda::gdn
