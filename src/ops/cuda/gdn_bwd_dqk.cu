// Chunked gated delta rule backward, the gradients that need the chunk's states (formulas in
// gdn_chunk.cuh; S0 entering, dS the gradient of the state leaving, Vn, dVn from gdn_state.cu).
// One block per (b, value head, chunk); qn = rq q, kn = rk k:
//   X1 = diag(scale e^gam) dO S0,  dP = dO Vn^T,  dPm = lower(scale e^(gam_i - gam_j) dP)
//   dqn = X1 + dPm Kn;   dkn = dPm^T Qn + diag(e^(gamL - gam)) Vn dS   (gdn_bwd_wy.cu adds the rest)
//   dW = -dVn S0
//   dgam_i = qn_i.X1_i + sum_j Z_ij - sum_j Z_ji - c_i  (Z = P o dP, c_j = e^(gamL - gam_j) kn_j.(Vn dS)_j),
//   and the last step also gets sum_j c_j + e^gamL <dS, S0>.
// The products over dv run in kVS-column slices (accumulated in fp32 shared memory), so the states
// never sit in shared memory whole.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 256;

template <class E>
struct DqkSmem {
  static constexpr int C = kChunk<E>;
  float* x1;  // (C, dkp + 1): X1, then the dkn part
  float* x2;  // dP (C, C + 1), then Vn dS (C, dkp + 1)
  float* x3;  // (C, dkp + 1): dVn S0
  E* k;       // (C, dkp + kPad) raw rows
  // Operands of one phase at a time:
  E* sa;         // slices (C, kVS + kPad): dO | Vn
  E* sb;         // slices (C, kVS + kPad): Vn | dVn
  E* sc;         // slices (kVS, dkp + kPad): S0 | dS
  E* sd;         // slice (kVS, dkp + kPad): - | S0
  E* q;          // (C, dkp + kPad) raw rows
  E* p;          // (C, C + kPad)
  E* pq;         // (C, C + kPad): dPm diag(rk)
  E* pk;         // (C, C + kPad): diag(rq) dPm
  float* gates;  // (4, C)
  float* part;   // (4, C): qn.X1, row sums of Z, column sums of Z, c
  float* red;    // (32)
  size_t bytes;
  __host__ __device__ DqkSmem(uintptr_t base, const Dims& d) {
    SmemCarver c{base};
    const size_t acc = size_t(C) * (d.dkp + 1);
    x1 = c.take<float>(acc);
    x2 = c.take<float>(acc > size_t(C) * (C + 1) ? acc : size_t(C) * (C + 1));
    x3 = c.take<float>(acc);
    k = c.take<E>(size_t(C) * (d.dkp + kPad));
    const size_t ops = c.off;  // the phases' operands share what follows
    sa = c.take<E>(size_t(C) * (kVS + kPad));
    sb = c.take<E>(size_t(C) * (kVS + kPad));
    sc = c.take<E>(size_t(kVS) * (d.dkp + kPad));
    sd = c.take<E>(size_t(kVS) * (d.dkp + kPad));
    const size_t slices_end = c.off;
    c.off = ops;
    q = c.take<E>(size_t(C) * (d.dkp + kPad));
    p = c.take<E>(size_t(C) * (C + kPad));
    pq = c.take<E>(size_t(C) * (C + kPad));
    pk = c.take<E>(size_t(C) * (C + kPad));
    if (c.off < slices_end) c.off = slices_end;
    gates = c.take<float>(4 * C);
    part = c.take<float>(4 * C);
    red = c.take<float>(32);
    bytes = c.off;
  }
};

template <class E>
__global__ void __launch_bounds__(kThreads) gdn_bwd_dqk_kernel(Dims d, Inputs<E> in, const E* dout, Work<E> ws) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const DqkSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const ChunkPos<E> cp(d, blockIdx.x / d.nc, int(blockIdx.x % d.nc));
  const int L = cp.L, ldk = d.dkp + kPad, lds = kVS + kPad, ldc = C + kPad, lda = d.dkp + 1, ldp = C + 1;
  const float *gam = s.gates, *rq = s.gates + 2 * C, *rk = s.gates + 3 * C;
  float *t1 = s.part, *rowz = s.part + C, *colz = s.part + 2 * C, *c3 = s.part + 3 * C;
  const E* s0 = ws.s0 + cp.bhc * d.dvp * d.dkp;
  const E* vn = ws.vn + cp.bhc * C * d.dvp;
  load_gates(s.gates, ws, cp.bhc);

  // dO S0 and dO Vn^T over dv slices.
  for (int vs = 0; vs < d.dvp; vs += kVS) {
    load_tile(s.sa, lds, dout + cp.v_off(d) + vs, int64_t(d.Hv) * d.dv, C, kVS, L, d.dv - vs);
    load_tile(s.sb, lds, vn + vs, d.dvp, C, kVS, C, kVS);
    load_tile(s.sc, ldk, s0 + int64_t(vs) * d.dkp, d.dkp, kVS, d.dkp, kVS, d.dkp);
    tiles_ready();
    const bool first = vs == 0;
    block_gemm(
        C, d.dkp, [&](int i, int n, float acc) { s.x1[i * lda + n] = first ? acc : s.x1[i * lda + n] + acc; },
        mm<false, true>(s.sa, lds, s.sc, ldk, kVS));
    block_gemm(
        C, C, [&](int i, int j, float acc) { s.x2[i * ldp + j] = first ? acc : s.x2[i * ldp + j] + acc; },
        mm<false, false>(s.sa, lds, s.sb, lds, kVS));
    __syncthreads();
  }

  load_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  load_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  load_tile(s.p, ldc, ws.p + cp.bhc * C * C, C, C, C, C, C);
  tiles_ready();
  for (int i = threadIdx.x; i < C; i += blockDim.x) {  // X1 scaled; qn.X1; row sums of Z
    const float xs = i < L ? d.scale * expf(gam[i]) : 0.0f;
    float qx = 0.0f, z = 0.0f;
    for (int n = 0; n < d.dkp; ++n) {
      const float x = s.x1[i * lda + n] * xs;
      s.x1[i * lda + n] = x;
      qx += to_f(s.q[i * ldk + n]) * x;
    }
    for (int j = 0; j <= i && i < L; ++j) z += to_f(s.p[i * ldc + j]) * s.x2[i * ldp + j];
    t1[i] = rq[i] * qx;
    rowz[i] = z;
  }
  for (int j = threadIdx.x; j < C; j += blockDim.x) {  // column sums of Z
    float z = 0.0f;
    for (int i = j; i < L; ++i) z += to_f(s.p[i * ldc + j]) * s.x2[i * ldp + j];
    colz[j] = z;
  }
  for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) {
    const int i = idx / C, j = idx % C;
    const float dpm = j <= i && i < L ? d.scale * expf(gam[i] - gam[j]) * s.x2[i * ldp + j] : 0.0f;
    s.pq[i * ldc + j] = from_f<E>(dpm * rk[j]);
    s.pk[i * ldc + j] = from_f<E>(dpm * rq[i]);
  }
  __syncthreads();
  block_gemm(
      C, d.dkp,
      [&](int i, int n, float acc) {
        if (i < L && n < d.dk) ws.dqn[cp.head_off(d, i) + n] = s.x1[i * lda + n] + acc;
      },
      mm<false, true>(s.pq, ldc, s.k, ldk, C));
  __syncthreads();
  block_gemm(
      C, d.dkp, [&](int j, int n, float acc) { s.x1[j * lda + n] = acc; }, mm<true, true>(s.pk, ldc, s.q, ldk, C));
  __syncthreads();

  // Vn dS and dVn S0 over dv slices; <dS, S0>.
  const E* ds = ws.ds + cp.bhc * d.dvp * d.dkp;
  const E* dvn = ws.dvn + cp.bhc * C * d.dvp;
  float dot = 0.0f;
  for (int vs = 0; vs < d.dvp; vs += kVS) {
    load_tile(s.sa, lds, vn + vs, d.dvp, C, kVS, C, kVS);
    load_tile(s.sb, lds, dvn + vs, d.dvp, C, kVS, C, kVS);
    load_tile(s.sc, ldk, ds + int64_t(vs) * d.dkp, d.dkp, kVS, d.dkp, kVS, d.dkp);
    load_tile(s.sd, ldk, s0 + int64_t(vs) * d.dkp, d.dkp, kVS, d.dkp, kVS, d.dkp);
    tiles_ready();
    const bool first = vs == 0;
    block_gemm(
        C, d.dkp, [&](int i, int n, float acc) { s.x2[i * lda + n] = first ? acc : s.x2[i * lda + n] + acc; },
        mm<false, true>(s.sa, lds, s.sc, ldk, kVS));
    block_gemm(
        C, d.dkp, [&](int i, int n, float acc) { s.x3[i * lda + n] = first ? acc : s.x3[i * lda + n] + acc; },
        mm<false, true>(s.sb, lds, s.sd, ldk, kVS));
    for (int idx = threadIdx.x; idx < kVS * d.dkp; idx += blockDim.x) {
      const int r = idx / d.dkp, n = idx % d.dkp;
      dot += to_f(s.sc[r * ldk + n]) * to_f(s.sd[r * ldk + n]);
    }
    __syncthreads();
  }
  dot = block_sum(dot, s.red);

  const float gl = gam[C - 1];
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    float x = 0.0f;
    for (int n = 0; n < d.dk && j < L; ++n) x += to_f(s.k[j * ldk + n]) * s.x2[j * lda + n];
    c3[j] = j < L ? expf(gl - gam[j]) * rk[j] * x : 0.0f;
  }
  E* dw = ws.dw + cp.bhc * C * d.dkp;
  for (int idx = threadIdx.x; idx < C * d.dkp; idx += blockDim.x) {
    const int j = idx / d.dkp, n = idx % d.dkp;
    if (j < L && n < d.dk) ws.dkn[cp.head_off(d, j) + n] = s.x1[j * lda + n] + expf(gl - gam[j]) * s.x2[j * lda + n];
    dw[idx] = from_f<E>(-s.x3[j * lda + n]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum_c = 0.0f;
    for (int j = 0; j < L; ++j) sum_c += c3[j];
    for (int i = 0; i < C; ++i) {
      float g = i < L ? t1[i] + rowz[i] - colz[i] - c3[i] : 0.0f;
      if (i == L - 1) g += sum_c + expf(gl) * dot;
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
