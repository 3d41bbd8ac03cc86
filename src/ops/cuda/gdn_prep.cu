// Chunked gated delta rule, the per-chunk step (formulas in gdn_chunk.cuh): one block per (b, value
// head, chunk) computes the gate arrays (g = -exp(A_log) softplus(alpha + dt_bias), gam = cumsum g,
// beta = sigmoid(beta_raw), the norms' reciprocals rq, rk, and the products of gdn_chunk.cuh's Gate),
// A, T = (I + A)^-1 in fp32, and writes W, U, P, the gates, and T when the backward asks for it.
// The diagonal scalings of W and U go into T's columns before the product.
// T: 16 x 16 diagonal blocks by forward substitution (one column per thread,
// T[i][c] = -sum_{c<=j<i} A[i][j] T[j][c]), then block rows in turn, T_ij = -T_ii sum_{j<=k<i} A_ik T_kj.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 256;
constexpr int kBlk = 16;  // diagonal blocks of T

template <class E>
struct PrepSmem {
  static constexpr int C = kChunk<E>;
  E* q;          // (C, dkp + kRowPad) raw rows
  E* k;          // (C, dkp + kRowPad)
  E* v;          // (C, dvp + kRowPad)
  float* a;      // (C, C + 1): -A
  float* t;      // (C, C + 1)
  float* x;      // (C - kBlk, kBlk): a block row's sums
  E* tk;         // (C, C + kRowPad): T diag(wk)
  E* tv;         // (C, C + kRowPad): T diag(beta)
  float* g;      // (C) log decay per step
  float* part;   // (2, 4, C): partial sums of squares of q and k rows
  float* gates;  // (kGates, C)
  size_t bytes;
  __host__ __device__ PrepSmem(uintptr_t base, const Dims& d) {
    SmemCarver sc{base};
    q = sc.take<E>(size_t(C) * (d.dkp + kRowPad));
    k = sc.take<E>(size_t(C) * (d.dkp + kRowPad));
    v = sc.take<E>(size_t(C) * (d.dvp + kRowPad));
    a = sc.take<float>(size_t(C) * (C + 1));
    t = sc.take<float>(size_t(C) * (C + 1));
    x = sc.take<float>(size_t(C - kBlk) * kBlk);
    tk = sc.take<E>(size_t(C) * (C + kRowPad));
    tv = sc.take<E>(size_t(C) * (C + kRowPad));
    g = sc.take<float>(C);
    part = sc.take<float>(8 * C);
    gates = sc.take<float>(kGates * C);
    bytes = sc.off;
  }
};

// t = (I + A)^-1 from na = -A (strictly lower, C x C, row stride ld); rows from L on are the identity's.
template <int C>
__device__ void invert_unit_lower(float* t, const float* na, float* x, int ld, int L) {
  for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) t[idx / C * ld + idx % C] = idx / C == idx % C;
  __syncthreads();
  for (int col = threadIdx.x; col < C; col += blockDim.x) {
    const int end = min(L, (col / kBlk + 1) * kBlk);
    for (int i = col + 1; i < end; ++i) {
      float s = 0.0f;
      for (int j = col; j < i; ++j) s += na[i * ld + j] * t[j * ld + col];
      t[i * ld + col] = s;
    }
  }
  __syncthreads();
  for (int r0 = kBlk; r0 < C; r0 += kBlk) {
    const int n = r0 * kBlk;  // the block row's elements left of the diagonal block
    for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
      const int r = idx / r0, c = idx % r0;
      float s = 0.0f;
      for (int j = c / kBlk * kBlk; j < r0; ++j) s += na[(r0 + r) * ld + j] * t[j * ld + c];
      x[idx] = s;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
      const int r = idx / r0, c = idx % r0;
      float s = 0.0f;
      for (int m = 0; m <= r; ++m) s += t[(r0 + r) * ld + r0 + m] * x[m * r0 + c];
      t[(r0 + r) * ld + c] = s;
    }
    __syncthreads();
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) gdn_prep_kernel(Dims d, Inputs<E> in, Work<E> ws) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const PrepSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const ChunkPos<E> cp(d, blockIdx.x / d.nc, int(blockIdx.x % d.nc));
  const int L = cp.L, ldk = d.dkp + kRowPad, ldv = d.dvp + kRowPad, ldc = C + kRowPad, lda = C + 1;
  float* gate = s.gates;
  float *gam = gate + kGam * C, *beta = gate + kBeta * C, *rq = gate + kRq * C, *rk = gate + kRk * C;

  stage_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  stage_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  stage_tile(s.v, ldv, in.v + cp.v_off(d), int64_t(d.Hv) * d.dv, C, d.dvp, L, d.dv);
  const float neg_a = -expf(in.A_log[cp.h]), dt_bias = in.dt_bias[cp.h];
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    s.g[i] = i < L ? neg_a * softplus(to_float(in.alpha[cp.gate_off(d, i)]) + dt_bias) : 0.0f;
    beta[i] = i < L ? sigmoid(to_float(in.beta_raw[cp.gate_off(d, i)])) : 0.0f;
  }
  tiles_ready();
  if (threadIdx.x == 0) {
    float acc = 0.0f;
    for (int i = 0; i < C; ++i) gam[i] = acc += s.g[i];
  }
  for (int idx = threadIdx.x; idx < 4 * C; idx += blockDim.x) {  // four threads per row
    const int i = idx / 4;
    float sq = 0.0f, sk = 0.0f;
    for (int j = idx % 4; j < d.dk; j += 4) {
      const float qv = to_float(s.q[i * ldk + j]), kv = to_float(s.k[i * ldk + j]);
      sq += qv * qv;
      sk += kv * kv;
    }
    s.part[idx] = sq;
    s.part[4 * C + idx] = sk;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float* pq = s.part + 4 * i;
    const float* pk = s.part + 4 * C + 4 * i;
    const float e = expf(gam[i]);
    rq[i] = i < L ? 1.0f / sqrtf((pq[0] + pq[1]) + (pq[2] + pq[3]) + kNormEps) : 0.0f;
    rk[i] = i < L ? 1.0f / sqrtf((pk[0] + pk[1]) + (pk[2] + pk[3]) + kNormEps) : 0.0f;
    gate[kEd * C + i] = expf(gam[C - 1] - gam[i]);
    gate[kEq * C + i] = d.scale * e;
    gate[kWk * C + i] = beta[i] * e * rk[i];
  }
  __syncthreads();

  block_gemm(
      C, C,
      [&](int i, int j, float a0, float a1) {
        const float f = -beta[i] * rk[i];
        s.a[i * lda + j] = j < i && i < L ? f * rk[j] * expf(gam[i] - gam[j]) * a0 : 0.0f;
        s.a[i * lda + j + 1] = j + 1 < i && i < L ? f * rk[j + 1] * expf(gam[i] - gam[j + 1]) * a1 : 0.0f;
      },
      mm<false, false>(s.k, ldk, s.k, ldk, d.dkp));
  E* p = ws.p + cp.bhc * C * C;
  block_gemm_from(
      4, C, C,
      [&](int i, int j, float a0, float a1) {
        const float f = d.scale * rq[i];
        store2(p + i * C + j, j <= i && i < L ? f * rk[j] * expf(gam[i] - gam[j]) * a0 : 0.0f,
               j + 1 <= i && i < L ? f * rk[j + 1] * expf(gam[i] - gam[j + 1]) * a1 : 0.0f);
      },
      mm<false, false>(s.q, ldk, s.k, ldk, d.dkp));
  for (int i = threadIdx.x; i < kGates * C; i += blockDim.x) ws.gates[cp.bhc * kGates * C + i] = gate[i];
  __syncthreads();

  invert_unit_lower<C>(s.t, s.a, s.x, lda, L);

  E* tg = ws.t != nullptr ? ws.t + cp.bhc * C * C : nullptr;
  const float* wk = gate + kWk * C;
  for (int idx = threadIdx.x; idx < C * C / 2; idx += blockDim.x) {
    const int i = idx / (C / 2), j = 2 * (idx % (C / 2));
    const float t0 = s.t[i * lda + j], t1 = s.t[i * lda + j + 1];
    store2(s.tk + i * ldc + j, t0 * wk[j], t1 * wk[j + 1]);
    store2(s.tv + i * ldc + j, t0 * beta[j], t1 * beta[j + 1]);
    if (tg != nullptr) store2(tg + i * C + j, t0, t1);
  }
  __syncthreads();

  E* w = ws.w + cp.bhc * C * d.dkp;
  E* u = ws.u + cp.bhc * C * d.dvp;
  block_gemm(
      C, d.dkp, [&](int i, int n, float a0, float a1) { store2(w + i * d.dkp + n, a0, a1); },
      mm<false, true>(s.tk, ldc, s.k, ldk, C));
  block_gemm_from(
      4, C, d.dvp, [&](int i, int n, float a0, float a1) { store2(u + i * d.dvp + n, a0, a1); },
      mm<false, true>(s.tv, ldc, s.v, ldv, C));
}

}  // namespace

template <class E>
void launch_prep(const Dims& d, const Inputs<E>& in, const Work<E>& ws, cudaStream_t s) {
  const size_t smem = PrepSmem<E>(0, d).bytes;
  auto kern = gdn_prep_kernel<E>;
  allow_smem(kern, smem, "gdn_prep_kernel smem");
  kern<<<unsigned(d.B * d.Hv * d.nc), kThreads, smem, s>>>(d, in, ws);
  check_launch("gdn_prep_kernel");
}

template void launch_prep<float>(const Dims&, const Inputs<float>&, const Work<float>&, cudaStream_t);
template void launch_prep<bf16>(const Dims&, const Inputs<bf16>&, const Work<bf16>&, cudaStream_t);

}  // namespace hytra::cuda::gdn
