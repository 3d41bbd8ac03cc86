// Chunked gated delta rule, the per-chunk step (formulas in gdn_chunk.cuh): one block per (b, value
// head, chunk) computes the gates (g = -exp(A_log) softplus(alpha + dt_bias), gam = cumsum g,
// beta = sigmoid(beta_raw), rq, rk), A, T = (I + A)^-1 by forward substitution in fp32 (one column
// per thread, T[i][c] = -sum_{c<=j<i} A[i][j] T[j][c]), and writes W, U, P, the gates, and T when
// the backward asks for it. The diagonal scalings of W and U go into T's columns before the product.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 256;

template <class E>
struct PrepSmem {
  static constexpr int C = kChunk<E>;
  E* q;          // (C, dkp + kPad) raw rows
  E* k;          // (C, dkp + kPad)
  E* v;          // (C, dvp + kPad)
  float* a;      // (C, C + 1): -A
  float* t;      // (C, C + 1)
  E* tk;         // (C, C + kPad): T diag(beta e^gam rk)
  E* tv;         // (C, C + kPad): T diag(beta)
  float* g;      // (C) log decay per step
  float* gates;  // (4, C): gam, beta, rq, rk
  size_t bytes;
  __host__ __device__ PrepSmem(uintptr_t base, const Dims& d) {
    SmemCarver sc{base};
    q = sc.take<E>(size_t(C) * (d.dkp + kPad));
    k = sc.take<E>(size_t(C) * (d.dkp + kPad));
    v = sc.take<E>(size_t(C) * (d.dvp + kPad));
    a = sc.take<float>(size_t(C) * (C + 1));
    t = sc.take<float>(size_t(C) * (C + 1));
    tk = sc.take<E>(size_t(C) * (C + kPad));
    tv = sc.take<E>(size_t(C) * (C + kPad));
    g = sc.take<float>(C);
    gates = sc.take<float>(4 * C);
    bytes = sc.off;
  }
};

template <class E>
__global__ void __launch_bounds__(kThreads) gdn_prep_kernel(Dims d, Inputs<E> in, Work<E> ws) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const PrepSmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const ChunkPos<E> cp(d, blockIdx.x / d.nc, int(blockIdx.x % d.nc));
  const int L = cp.L, ldk = d.dkp + kPad, ldv = d.dvp + kPad, ldc = C + kPad, lda = C + 1;
  float *gam = s.gates, *beta = s.gates + C, *rq = s.gates + 2 * C, *rk = s.gates + 3 * C;

  load_tile(s.q, ldk, in.q + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  load_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  load_tile(s.v, ldv, in.v + cp.v_off(d), int64_t(d.Hv) * d.dv, C, d.dvp, L, d.dv);
  const float neg_a = -expf(in.A_log[cp.h]), dt_bias = in.dt_bias[cp.h];
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    s.g[i] = i < L ? neg_a * softplus(to_f(in.alpha[cp.gate_off(d, i)]) + dt_bias) : 0.0f;
    beta[i] = i < L ? sigmoid(to_f(in.beta_raw[cp.gate_off(d, i)])) : 0.0f;
  }
  tiles_ready();
  if (threadIdx.x == 0) {
    float acc = 0.0f;
    for (int i = 0; i < C; ++i) gam[i] = acc += s.g[i];
  }
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float sq = 0.0f, sk = 0.0f;
    for (int j = 0; j < d.dk; ++j) {
      const float qv = to_f(s.q[i * ldk + j]), kv = to_f(s.k[i * ldk + j]);
      sq += qv * qv;
      sk += kv * kv;
    }
    rq[i] = i < L ? 1.0f / sqrtf(sq + kNormEps) : 0.0f;
    rk[i] = i < L ? 1.0f / sqrtf(sk + kNormEps) : 0.0f;
  }
  __syncthreads();

  block_gemm(
      C, C,
      [&](int i, int j, float acc) {
        s.a[i * lda + j] = j < i && i < L ? -beta[i] * rk[i] * rk[j] * expf(gam[i] - gam[j]) * acc : 0.0f;
      },
      mm<false, false>(s.k, ldk, s.k, ldk, d.dkp));
  E* p = ws.p + cp.bhc * C * C;
  block_gemm(
      C, C,
      [&](int i, int j, float acc) {
        p[i * C + j] = from_f<E>(j <= i && i < L ? d.scale * rq[i] * rk[j] * expf(gam[i] - gam[j]) * acc : 0.0f);
      },
      mm<false, false>(s.q, ldk, s.k, ldk, d.dkp));
  __syncthreads();

  // Column col of T: rows below L are those of the identity (A is zero there).
  for (int col = threadIdx.x; col < C; col += blockDim.x) {
    for (int i = 0; i < C; ++i) s.t[i * lda + col] = i == col ? 1.0f : 0.0f;
    for (int i = col + 1; i < L; ++i) {
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // independent chains, added in a fixed order
      int j = col;
      for (; j + 4 <= i; j += 4)
        for (int u = 0; u < 4; ++u) part[u] += s.a[i * lda + j + u] * s.t[(j + u) * lda + col];
      for (; j < i; ++j) part[0] += s.a[i * lda + j] * s.t[j * lda + col];
      s.t[i * lda + col] = (part[0] + part[1]) + (part[2] + part[3]);
    }
  }
  __syncthreads();

  E* tg = ws.t != nullptr ? ws.t + cp.bhc * C * C : nullptr;
  for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) {
    const int i = idx / C, j = idx % C;
    const float t = s.t[i * lda + j];
    s.tk[i * ldc + j] = from_f<E>(t * beta[j] * expf(gam[j]) * rk[j]);
    s.tv[i * ldc + j] = from_f<E>(t * beta[j]);
    if (tg != nullptr) tg[idx] = from_f<E>(t);
  }
  for (int i = threadIdx.x; i < 4 * C; i += blockDim.x) ws.gates[cp.bhc * 4 * C + i] = s.gates[i];
  __syncthreads();

  E* w = ws.w + cp.bhc * C * d.dkp;
  E* u = ws.u + cp.bhc * C * d.dvp;
  block_gemm(
      C, d.dkp, [&](int i, int n, float acc) { w[i * d.dkp + n] = from_f<E>(acc); },
      mm<false, true>(s.tk, ldc, s.k, ldk, C));
  block_gemm(
      C, d.dvp, [&](int i, int n, float acc) { u[i * d.dvp + n] = from_f<E>(acc); },
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
