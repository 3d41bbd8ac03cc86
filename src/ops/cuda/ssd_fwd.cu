// Mamba-2 SSD scan on CUDA, chunked (state-space duality), forward; the backward is ssd_bwd.cu (ops.h
// "SSD"; docs/spec/mamba_gdn.md §1 steps 3-4; the CPU reference ops/cpu/ssd.cpp). Per batch b and head h
// (group g), dt_t = softplus(dt_raw_t + dt_bias[h]), A = -exp(A_log[h]); the steps are cut into chunks of
// Q, and within a chunk cum_i = sum_{k<=i} dt_k A (fp32). With S_{c-1} the state entering chunk c:
//   y_i = sum_{j<=i} exp(cum_i - cum_j) (C_i.B_j) dt_j x_j       ("diagonal block": a masked Q x Q product)
//       + exp(cum_i) S_{c-1} C_i + D x_i                          (the state from earlier chunks)
//   S_c = exp(cumL) S_{c-1} + sum_j exp(cumL - cum_j) dt_j x_j B_j^T   (cumL = cum at the chunk's end)
// Kernels (ssd_state.cu for the first three): dt and cum per step (cum kept divided by ln 2, so decays
// are exp2 of differences); C_i.B_j per (b, chunk, g) (shared by the group's heads); the state
// recurrence per (b, h, 64x64 state tile), sequential over chunks with the state in fp32 registers,
// storing each chunk's entering state; then ssd_out_kernel per (b, chunk, h, 64 columns of P): warp w
// owns rows 16w.. of the chunk, first C S^T over N in 64-wide steps, scaled by exp(cum_i), then the
// diagonal block (C.B from shared memory, masked and decayed in the fragments) times x, then D x.
// Products are warp_mma.cuh's 16x8x16 tiles: bf16 operands on the tensor cores with fp32
// accumulation, fp32 operands through the exact fp32 path. Tiles reach shared memory by cp.async. No
// atomics: bitwise deterministic. Scratch (caching allocator): dt, cum (B,H,T'), C.B (B,T'/Q,G,Q,Q),
// states (B,H,T'/Q,P',N') in x's dtype, with T' = T rounded up to Q and P', N' to 64; dt, cum and the
// states go to the caller's `keep` when it asks (ssd_bwd.cu then reads them instead of remaking them).
// At nemotron-h-1b's shape (B 2, T 4096, H 64, P 64, N 128, G 8, Q 128, bf16) the floors are about
// 0.06 ms forward (169 MB of inputs and y at 3 TB/s; the products, 23 GFLOP, take less) and 0.09 ms
// backward (270 MB; 83 GFLOP); bench/NOTES.md has the measured times.
#include <algorithm>
#include <type_traits>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/ssd.cuh"

namespace hytra::cuda::ssd {
namespace {

// y for one (b, chunk c, h) and 64 columns p0.. of P; 2Q threads, `bufs` of state_product's tiles.
template <class T>
__global__ void __launch_bounds__(2 * kMaxQ) ssd_out_kernel(Args<T> a, T* y, int bufs) {
  const Dims& d = a.d;
  const int p0 = int(blockIdx.x % d.pt) * kTile;
  const int64_t h = blockIdx.x / d.pt, c = blockIdx.y, b = blockIdx.z, g = h / d.hpg(), t0 = c * d.Q;
  const int rows = int(std::min<int64_t>(d.Q, d.T - t0)), warp = int(threadIdx.x) / 32, r0 = 16 * warp;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int ld = kTile + kPad<T>;
  const int ldq = d.Q + kPad<T>;
  T* sx = reinterpret_cast<T*>(smem);                              // (Q, ld) x[:, p0..]
  T* scb = sx + d.Q * ld;                                          // (Q, ldq) C_i.B_j
  T* sc = scb + d.Q * ldq;                                         // bufs x (Q, ld) Cm[:, n0..]
  T* ss = sc + bufs * d.Q * ld;                                    // bufs x (64, ld) state rows p0.., columns n0..
  float* s_dt = reinterpret_cast<float*>(ss + bufs * kTile * ld);  // (Q)
  float* s_cum = s_dt + d.Q;                                       // (Q)
  stage_scalars(s_dt, s_cum, a, b, h, c);
  stage_tile(sx, ld, a.x + d.xrow(b, t0, h) + p0, d.H * d.P, d.Q, kTile, rows, int(d.P - p0));
  stage_tile(scb, ldq, a.cb + d.cb(b, c, g), d.Q, d.Q, d.Q, d.Q, d.Q);
  cp_async_commit();
  Acc acc[8] = {};  // rows r0.., columns p0 + 8 nt..
  if (c > 0)        // C S^T over N (the state entering chunk 0 is zero)
    state_product(acc, a, sc, ss, bufs, a.Cm, a.states + d.state(b, h, c) + int64_t(p0) * d.SN(), b, t0, g, rows, r0);
  cp_async_wait<0>();
  __syncthreads();
  const int i_lo = r0 + acc_row(0), i_hi = r0 + acc_row(2);
  const float f_lo = exp2f(s_cum[i_lo]), f_hi = exp2f(s_cum[i_hi]);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    acc[nt].v[0] *= f_lo;
    acc[nt].v[1] *= f_lo;
    acc[nt].v[2] *= f_hi;
    acc[nt].v[3] *= f_hi;
  }
  // Diagonal block: rows i of (C.B)_ij exp(cum_i - cum_j) dt_j (j <= i) times x_j. Left of the
  // warp's 16 columns, exp(cum_i - cum_j) = exp(cum_i - cum_r0) exp(cum_r0 - cum_j) (j < r0 <= i: both
  // factors at most 1): per-row and per-column factors, not one exponential each.
  const float ref = s_cum[r0];
  const float fi[2] = {exp2f(s_cum[r0 + a_row(0)] - ref), exp2f(s_cum[r0 + a_row(2)] - ref)};
  for (int kt = 0; kt <= warp; ++kt) {
    FragA<T> fa;
    load_a<true>(fa, scb, ldq, r0, 16 * kt);
    float v[8];
    get_a(fa, v);
    if (kt == warp) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int i = r0 + a_row(e), j = 16 * kt + a_col(e);
        v[e] = j <= i ? v[e] * exp2f(s_cum[i] - s_cum[j]) * s_dt[j] : 0.0f;
      }
    } else {
      constexpr int top[4] = {0, 1, 4, 5};  // elements of row g; e + 2 is row g + 8 of the same column
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int e = top[k], j = 16 * kt + a_col(e);
        const float fj = exp2f(ref - s_cum[j]) * s_dt[j];
        v[e] *= fi[0] * fj;
        v[e + 2] *= fi[1] * fj;
      }
    }
    set_a(fa, v);
    mma_x64<false>(acc, fa, sx, ld, 16 * kt);
  }
  const float Dh = a.D[h];
  const bool paired = d.P % 2 == 0;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = r0 + acc_row(2 * hf);
    if (i >= rows) continue;
    T* yr = y + d.xrow(b, t0 + i, h);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int p = 8 * nt + acc_col(0);
      const float2 xv = load2(sx + i * ld + p);
      store_pair(yr + p0 + p, acc[nt].v[2 * hf] + Dh * xv.x, acc[nt].v[2 * hf + 1] + Dh * xv.y,
                 int(std::min<int64_t>(2, d.P - p0 - p)), paired);
    }
  }
}

// dt, C.B, the states, then y.
template <class T>
void forward(Exec& ex, const Args<T>& a, T* y) {
  launch_dt(ex, a);
  launch_cb(ex, a, false);
  launch_scan(ex, a, false, nullptr);
  auto smem_of = [&](int bufs) { return out_smem(a.d, sizeof(T), bufs); };
  const int bufs = product_bufs(&ssd_out_kernel<T>, 2 * a.d.Q, smem_of, "ssd_out_kernel smem");
  allow_smem(&ssd_out_kernel<T>, smem_of(bufs), "ssd_out_kernel smem");
  const dim3 grid(unsigned(a.d.pt * a.d.H), unsigned(a.d.nC), unsigned(a.d.B));
  ssd_out_kernel<T><<<grid, 2 * a.d.Q, size_t(smem_of(bufs)), stream_of(ex)>>>(a, y, bufs);
  check_launch("ssd_out_kernel");
}

}  // namespace
}  // namespace hytra::cuda::ssd

namespace hytra::cuda {

void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                        const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size,
                        std::vector<Tensor>* keep) {
  ssd::with_args("ssd_chunk_scan_fwd", x, dt_raw, Bm, Cm, dt_bias, A_log, D, nullptr, chunk_size, keep, nullptr,
                 [&](auto& a) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(a.x)>>;
    ssd::forward(ex, a, static_cast<T*>(y.raw()));
  });
}

}  // namespace hytra::cuda
