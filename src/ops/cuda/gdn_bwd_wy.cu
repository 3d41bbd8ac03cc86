// Chunked gated delta rule backward through the UT transform (formulas in gdn_chunk.cuh): one block per
// (b, value head, chunk), given dU = dVn and dW (gdn_state.cu, gdn_bwd_dqk.cu); kn = rk k:
//   Y = T^T dW, Yv = T^T dU:  dv = diag(beta) Yv;  dbeta += e^gam kn.Y + v.Yv;  dgam += beta e^gam kn.Y;
//                             dkn += diag(beta e^gam) Y
//   dT = dU (diag(beta) V)^T + dW (diag(beta e^gam) Kn)^T,  dA = -T^T dT T^T (strictly lower part)
//   with R = dA o e^(gam_i - gam_j) (kn_i.kn_j):  dbeta_i += sum_j R_ij;  dgam_i += beta_i sum_j R_ij;
//   dgam_j -= sum_i beta_i R_ij;  dkn += F Kn + F^T Kn, F = diag(beta) dA o e^(gam_i - gam_j)
// then dg = the chunk's reverse cumulative sum of dgam (gam_i = g_0 + .. + g_i), and dbeta, dg per token.
#include "ops/cuda/gdn_chunk.cuh"

namespace hytra::cuda::gdn {
namespace {

constexpr int kThreads = 512;

template <class E>
struct WySmem {
  static constexpr int C = kChunk<E>;
  E* t;          // (C, C + kRowPad)
  E* k;          // (C, dkp + kRowPad) raw rows
  E* dw;         // (C, dkp + kRowPad)
  E* v;          // (C, dvp + kRowPad) raw rows       } then dT | F diag(rk) (one buffer),
  E* du;         // (C, dvp + kRowPad)                } M1 = T^T dT, diag(rk) F
  E* dt;         // (C, C + kRowPad), over v
  E* m1;         // (C, C + kRowPad), over v / du
  E* fr;         // (C, C + kRowPad), over v / du
  float* y;      // (C, dkp + 4): Y, then the dkn part
  float* f;      // Yv (C, dvp + 4), then dT and R (C, C + 4)
  float* gram;   // (C, C + 4): k_i.k_j
  float* gates;  // (kGates, C)
  float* part;   // (2, 4, C): four partial row sums each
  float* sums;   // (4, C): dgam, dbeta, beta_i sum_j R_ij, sum_i beta_i R_ij
  size_t bytes;
  __host__ __device__ WySmem(uintptr_t base, const Dims& d) {
    SmemCarver c{base};
    t = c.take<E>(size_t(C) * (C + kRowPad));
    k = c.take<E>(size_t(C) * (d.dkp + kRowPad));
    dw = c.take<E>(size_t(C) * (d.dkp + kRowPad));
    const size_t vu = c.off;
    v = c.take<E>(size_t(C) * (d.dvp + kRowPad));
    du = c.take<E>(size_t(C) * (d.dvp + kRowPad));
    const size_t vu_end = c.off;
    c.off = vu;
    dt = c.take<E>(size_t(C) * (C + kRowPad));
    m1 = c.take<E>(size_t(C) * (C + kRowPad));
    fr = c.take<E>(size_t(C) * (C + kRowPad));
    if (c.off < vu_end) c.off = vu_end;
    y = c.take<float>(size_t(C) * (d.dkp + 4));
    const size_t fv = size_t(C) * (d.dvp + 4), fc = size_t(C) * (C + 4);
    f = c.take<float>(fv > fc ? fv : fc);
    gram = c.take<float>(fc);
    gates = c.take<float>(kGates * C);
    part = c.take<float>(8 * C);
    sums = c.take<float>(4 * C);
    bytes = c.off;
  }
};

__device__ __forceinline__ float sum4(const float* p) { return (p[0] + p[1]) + (p[2] + p[3]); }

template <class E>
__global__ void __launch_bounds__(kThreads) gdn_bwd_wy_kernel(Dims d, Inputs<E> in, Work<E> ws, E* dv) {
  constexpr int C = kChunk<E>;
  extern __shared__ __align__(16) char smem_raw[];
  const WySmem<E> s(reinterpret_cast<uintptr_t>(smem_raw), d);
  const ChunkPos<E> cp(d, blockIdx.x / d.nc, int(blockIdx.x % d.nc));
  const int L = cp.L, ldk = d.dkp + kRowPad, ldv = d.dvp + kRowPad, ldc = C + kRowPad, ldy = d.dkp + 4;
  const int ldf = d.dvp + 4, ldr = C + 4;
  const float *gam = s.gates + kGam * C, *beta = s.gates + kBeta * C, *rk = s.gates + kRk * C;
  const float* wk = s.gates + kWk * C;
  float *dgam = s.sums, *dbeta = s.sums + C, *rowr = s.sums + 2 * C, *colr = s.sums + 3 * C;
  stage_tile(s.t, ldc, ws.t + cp.bhc * C * C, C, C, C, C, C);
  stage_tile(s.k, ldk, in.k + cp.qk_off(d), int64_t(d.Hk) * d.dk, C, d.dkp, L, d.dk);
  stage_tile(s.dw, ldk, ws.dw + cp.bhc * C * d.dkp, d.dkp, C, d.dkp, C, d.dkp);
  stage_tile(s.v, ldv, in.v + cp.v_off(d), int64_t(d.Hv) * d.dv, C, d.dvp, L, d.dv);
  stage_tile(s.du, ldv, ws.dvn + cp.bhc * C * d.dvp, d.dvp, C, d.dvp, C, d.dvp);
  load_gates(s.gates, ws, cp.bhc);
  stage_tile(dgam, C, ws.dgam + cp.bhc * C, C, 1, C, 1, C);
  tiles_ready();

  block_gemm(
      C, d.dkp, [&](int j, int n, float a0, float a1) { store2(s.y + j * ldy + n, a0, a1); },
      mm<true, true>(s.t, ldc, s.dw, ldk, C));
  block_gemm(
      C, d.dvp,
      [&](int j, int n, float a0, float a1) {
        store2(s.f + j * ldf + n, a0, a1);
        if (j < L) store_pair_in_row(dv + cp.v_off(d) + int64_t(j) * d.Hv * d.dv, n, d.dv, beta[j] * a0, beta[j] * a1);
      },
      mm<true, true>(s.t, ldc, s.du, ldv, C));
  block_gemm(
      C, C, [&](int i, int j, float a0, float a1) { store2(s.gram + i * ldr + j, a0, a1); },
      mm<false, false>(s.k, ldk, s.k, ldk, d.dkp));
  __syncthreads();
  for (int idx = threadIdx.x; idx < 4 * C; idx += blockDim.x) {  // k.Y and v.Yv, four threads per row
    const int j = idx / 4;
    float yk = 0.0f, yv = 0.0f;
    for (int n = idx % 4; n < d.dk && j < L; n += 4) yk += s.y[j * ldy + n] * to_float(s.k[j * ldk + n]);
    for (int n = idx % 4; n < d.dv && j < L; n += 4) yv += s.f[j * ldf + n] * to_float(s.v[j * ldv + n]);
    s.part[idx] = yk;
    s.part[4 * C + idx] = yv;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    const float yk = sum4(s.part + 4 * j), yv = sum4(s.part + 4 * C + 4 * j), e = expf(gam[j]);
    dbeta[j] = j < L ? e * rk[j] * yk + yv : 0.0f;
    dgam[j] += j < L ? wk[j] * yk : 0.0f;
  }
  for (int idx = threadIdx.x; idx < 4 * C; idx += blockDim.x) {
    const int j = idx / 4;
    const float f = beta[j] * expf(gam[j]);
    for (int n = idx % 4; n < d.dkp; n += 4) s.y[j * ldy + n] *= f;
  }
  block_gemm(
      C, C, [&](int i, int j, float a0, float a1) { store2(s.f + i * ldr + j, beta[j] * a0, beta[j + 1] * a1); },
      mm<false, false>(s.du, ldv, s.v, ldv, d.dvp));
  __syncthreads();
  block_gemm(
      C, C,
      [&](int i, int j, float a0, float a1) {
        store2(s.dt + i * ldc + j, s.f[i * ldr + j] + wk[j] * a0, s.f[i * ldr + j + 1] + wk[j + 1] * a1);
      },
      mm<false, false>(s.dw, ldk, s.k, ldk, d.dkp));
  __syncthreads();
  block_gemm(
      C, C, [&](int j, int l, float a0, float a1) { store2(s.m1 + j * ldc + l, a0, a1); },
      mm<true, true>(s.t, ldc, s.dt, ldc, C));
  __syncthreads();
  E* fl = s.dt;  // dT is spent
  // Element (j, l) of dA = -acc: F diag(rk) and diag(rk) F (F = beta_j e^(gam_j - gam_l) dA) and R.
  auto wy_terms = [&](int j, int l, float acc, float& a, float& b, float& r) {
    a = b = r = 0.0f;
    if (l < j && j < L) {
      const float da = -acc, e = expf(gam[j] - gam[l]), f = da * beta[j] * e;
      a = f * rk[l];
      b = f * rk[j];
      r = da * e * rk[j] * rk[l] * s.gram[j * ldr + l];
    }
  };
  block_gemm(
      C, C,
      [&](int j, int l, float a0, float a1) {
        float fa0, fb0, r0, fa1, fb1, r1;
        wy_terms(j, l, a0, fa0, fb0, r0);
        wy_terms(j, l + 1, a1, fa1, fb1, r1);
        store2(fl + j * ldc + l, fa0, fa1);
        store2(s.fr + j * ldc + l, fb0, fb1);
        store2(s.f + j * ldr + l, r0, r1);
      },
      mm<false, false>(s.m1, ldc, s.t, ldc, C));
  __syncthreads();
  for (int idx = threadIdx.x; idx < 4 * C; idx += blockDim.x) {  // R's row sums and beta-weighted column sums
    const int j = idx / 4;
    float rs = 0.0f, cs = 0.0f;
    for (int l = idx % 4; l < j; l += 4) rs += s.f[j * ldr + l];
    for (int i = j + 1 + idx % 4; i < L; i += 4) cs += beta[i] * s.f[i * ldr + j];
    s.part[idx] = rs;
    s.part[4 * C + idx] = cs;
  }
  block_gemm(
      C, d.dkp,
      [&](int j, int n, float a0, float a1) {
        if (j < L) {
          float* row = ws.dkn + cp.head_off(d, j);
          const float b0 = n < d.dk ? row[n] : 0.0f, b1 = n + 1 < d.dk ? row[n + 1] : 0.0f;
          store_pair_in_row(row, n, d.dk, b0 + s.y[j * ldy + n] + a0, b1 + s.y[j * ldy + n + 1] + a1);
        }
      },
      mm<false, true>(fl, ldc, s.k, ldk, C), mm<true, true>(s.fr, ldc, s.k, ldk, C));
  __syncthreads();
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    const float rs = sum4(s.part + 4 * j);
    dbeta[j] += rs;
    rowr[j] = beta[j] * rs;
    colr[j] = sum4(s.part + 4 * C + 4 * j);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc = 0.0f;
    for (int i = L - 1; i >= 0; --i) {
      acc += dgam[i] + rowr[i] - colr[i];
      ws.dg[cp.gate_off(d, i)] = acc;
      ws.dbeta[cp.gate_off(d, i)] = dbeta[i];
    }
  }
}

}  // namespace

template <class E>
void launch_bwd_wy(const Dims& d, const Inputs<E>& in, const Work<E>& ws, E* dv, cudaStream_t s) {
  const size_t smem = WySmem<E>(0, d).bytes;
  auto kern = gdn_bwd_wy_kernel<E>;
  allow_smem(kern, smem, "gdn_bwd_wy_kernel smem");
  kern<<<unsigned(d.B * d.Hv * d.nc), kThreads, smem, s>>>(d, in, ws, dv);
  check_launch("gdn_bwd_wy_kernel");
}

template void launch_bwd_wy<float>(const Dims&, const Inputs<float>&, const Work<float>&, float*, cudaStream_t);
template void launch_bwd_wy<bf16>(const Dims&, const Inputs<bf16>&, const Work<bf16>&, bf16*, cudaStream_t);

}  // namespace hytra::cuda::gdn
