// Mamba-2 SSD scan on CUDA, chunked, backward (forward and notation: ssd_fwd.cu). dt, cum and the states
// come from the forward (`kept`) or are recomputed from the inputs. With S_{c-1} entering and dS_c =
// dL/dS_c leaving chunk c,
// M_ij = exp(cum_i - cum_j) for j <= i (else 0), W_ij = dy_i.x_j, Z_ij = M_ij (C_i.B_j) dt_j W_ij:
//   dS_{c-1} = exp(cumL) dS_c + sum_i exp(cum_i) dy_i C_i^T                       (reverse recurrence)
//   r_j  = exp(cumL - cum_j) dS_c B_j + sum_i M_ij (C_i.B_j) dy_i;   dx_j = dt_j r_j + D dy_j
//   dB_j = sum_h [dt_j exp(cumL - cum_j) dS_c^T x_j + sum_i M_ij dt_j W_ij C_i]
//   dC_i = sum_h [exp(cum_i) S_{c-1}^T dy_i + sum_j M_ij dt_j W_ij B_j]
//   da_k = sum_{j<k<=i} Z_ij + sum_{i>=k} o_i + sum_{j<k} z_j + e_c     (a = dt A; cum's adjoint summed)
//     o_i = exp(cum_i) dy_i.S_{c-1} C_i,  z_j = dt_j exp(cumL - cum_j) x_j.dS_c B_j,
//     e_c = exp(cumL) <dS_c, S_{c-1}>
//   ddt_raw_k = (x_k.r_k + A da_k) sigmoid(dt_raw_k + dt_bias);   ddt_bias += sum ddt_raw,
//   dA_log += A sum_k da_k dt_k,   dD += sum dy.x
// No da term is a difference of sequence-long cumulative sums (the diagonal block's Z term is a
// prefix, within one chunk, of row-sum minus column-sum differences), so no cancellation grows with T.
// Kernels: dt/cum, B_j.C_i blocks, the forward and reverse recurrences (ssd_state.cu; the reverse one
// also gives e_c), dC and dB per (b, chunk, group), one kernel staging each head once for both (two
// where that would cost blocks per SM), summing the heads in order (ssd_bwd_bc.cu; also the Z term, o),
// ssd_dx_kernel per (b, chunk, h, 64 of P) (dx, and per step x.r, z), ssd_finish_kernel per
// (b, h, chunk) (da, ddt_raw and per-chunk parameter sums), ssd_param_kernel (fixed-order sums over
// b and chunks, += into the fp32 gradients). No atomics.
#include <algorithm>
#include <type_traits>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/ssd.cuh"

namespace hytra::cuda::ssd {
namespace {

constexpr int kParamThreads = 128;

// Per-step partial sums written by ssd_dx_kernel: (B, H, kRowParts, pt, T').
constexpr int kRowParts = 2;  // x.r, z

// dx for one (b, chunk c, h) and 64 columns p0.. of P; 2Q threads, warp w owns rows j = 16w..
template <class T>
__global__ void __launch_bounds__(2 * kMaxQ) ssd_dx_kernel(Args<T> a, T* dx, float* row_part, float* dd_part) {
  const Dims& d = a.d;
  const int ptile = int(blockIdx.x % d.pt), p0 = ptile * kTile;
  const int64_t h = blockIdx.x / d.pt, c = blockIdx.y, b = blockIdx.z, g = h / d.hpg(), t0 = c * d.Q;
  const int rows = int(std::min<int64_t>(d.Q, d.T - t0)), warp = int(threadIdx.x) / 32, r0 = 16 * warp;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int ld = kTile + kPad<T>;
  const int ldq = d.Q + kPad<T>;
  T* sdy = reinterpret_cast<T*>(smem);                      // (Q, ld) dy[:, p0..]
  T* scb = sdy + d.Q * ld;                                  // (Q, ldq) B_j.C_i
  T* sm = scb + d.Q * ldq;                                  // (Q, ld) Bm or Cm, 64 columns
  T* ss = sm + d.Q * ld;                                    // (64, ld) dS_c or S_{c-1}, rows p0.., 64 columns
  float* s_dt = reinterpret_cast<float*>(ss + kTile * ld);  // (Q)
  float* s_cum = s_dt + d.Q;                                // (Q)
  float* s_red = s_cum + d.Q;                               // (warps)
  stage_scalars(s_dt, s_cum, a, b, h, c);
  stage_tile(sdy, ld, a.dy + d.xrow(b, t0, h) + p0, d.H * d.P, d.Q, kTile, rows, int(d.P - p0));
  stage_tile(scb, ldq, a.cb + d.cb(b, c, g), d.Q, d.Q, d.Q, d.Q, d.Q);
  cp_async_commit();
  // x[t0 + j, p0 + p], p0 + p + 1 (0 past T or P), read where needed (the tile would not fit with Q 256).
  auto x_pair = [&](int j, int p) {
    const T* xr = a.x + d.xrow(b, t0 + std::min(j, rows - 1), h) + p0 + p;
    const bool in = j < rows;
    return make_float2(in && p0 + p < d.P ? to_float(xr[0]) : 0.0f, in && p0 + p + 1 < d.P ? to_float(xr[1]) : 0.0f);
  };
  const int64_t soff = d.state(b, h, c) + int64_t(p0) * d.SN();
  Acc r[8] = {};  // rows j, columns p0 + 8 nt..
  // One buffer: with two the kernel measured slower on H200 (likely less L1 left for its reads of x).
  if (c + 1 < d.nC) state_product(r, a, sm, ss, 1, a.Bm, a.dstates + soff, b, t0, g, rows, r0);
  cp_async_wait<0>();
  __syncthreads();
  const int row[2] = {r0 + acc_row(0), r0 + acc_row(2)};
  const float cumL = s_cum[d.Q - 1];
  float z[2] = {0.0f, 0.0f};
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float fr = exp2f(cumL - s_cum[row[hf]]);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int p = 8 * nt + acc_col(0);
      const float2 xv = x_pair(row[hf], p);
      r[nt].v[2 * hf] *= fr;
      r[nt].v[2 * hf + 1] *= fr;
      z[hf] += xv.x * r[nt].v[2 * hf] + xv.y * r[nt].v[2 * hf + 1];
    }
  }
  // Diagonal block: r_j += sum_{i>=j} (B_j.C_i) exp(cum_i - cum_j) dy_i. Right of the warp's 16
  // columns, exp(cum_i - cum_j) = exp(cum_i - cum_m) exp(cum_m - cum_j) with m = r0 + 15 (j <= m < i:
  // both factors at most 1): per-row and per-column factors, not one exponential each.
  const float ref = s_cum[r0 + 15];
  const float fj[2] = {exp2f(ref - s_cum[r0 + a_row(0)]), exp2f(ref - s_cum[r0 + a_row(2)])};
  for (int kt = warp; kt < d.Q / 16; ++kt) {
    FragA<T> fa;
    load_a<true>(fa, scb, ldq, r0, 16 * kt);
    float v[8];
    get_a(fa, v);
    if (kt == warp) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int j = r0 + a_row(e), i = 16 * kt + a_col(e);
        v[e] = i >= j ? v[e] * exp2f(s_cum[i] - s_cum[j]) : 0.0f;
      }
    } else {
      constexpr int top[4] = {0, 1, 4, 5};  // elements of row g; e + 2 is row g + 8 of the same column
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int e = top[k];
        const float fi = exp2f(s_cum[16 * kt + a_col(e)] - ref);
        v[e] *= fj[0] * fi;
        v[e + 2] *= fj[1] * fi;
      }
    }
    set_a(fa, v);
    mma_x64<false>(r, fa, sdy, ld, 16 * kt);
  }
  const float Dh = a.D[h];
  float xr[2] = {0.0f, 0.0f}, dd = 0.0f;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int j = row[hf];
    const float dtj = s_dt[j];
    T* out = dx + d.xrow(b, t0 + std::min(j, rows - 1), h) + p0;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int p = 8 * nt + acc_col(0);
      const float2 xv = x_pair(j, p), dv = load2(sdy + j * ld + p);
      const float r0v = r[nt].v[2 * hf], r1v = r[nt].v[2 * hf + 1];
      xr[hf] += xv.x * r0v + xv.y * r1v;
      dd += dv.x * xv.x + dv.y * xv.y;
      if (j < rows)
        store_pair(out + p, dtj * r0v + Dh * dv.x, dtj * r1v + Dh * dv.y, int(std::min<int64_t>(2, d.P - p0 - p)),
                   d.P % 2 == 0);
    }
  }
  auto quad_sum = [](float v) {  // over the 4 lanes of a row
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
  };
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float xr_sum = quad_sum(xr[hf]), z_sum = quad_sum(z[hf]);
    const int j = row[hf];
    if ((lane_id() & 3) == 0 && j < rows) {
      float* part = row_part + ((b * d.H + h) * kRowParts * d.pt + ptile) * d.TQ() + t0 + j;
      part[0] = xr_sum;
      part[d.pt * d.TQ()] = s_dt[j] * z_sum;
    }
  }
  dd = warp_sum(dd);
  if (lane_id() == 0) s_red[warp] = dd;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int w = 0; w < d.Q / 16; ++w) sum += s_red[w];
    dd_part[((b * d.H + h) * d.nC + c) * d.pt + ptile] = sum;
  }
}

// One (b, h, chunk c), Q threads (thread k: step t0 + k): da, ddt_raw (row pitch lddt), and fin_part
// (B,H,nC,3) = the chunk's sum of ddt_raw, A sum da dt, and sum dy.x. o_part: (B,H,nt,T') (launch_bc).
template <class T>
__global__ void ssd_finish_kernel(Args<T> a, T* ddt_raw, int64_t lddt, const float* row_part, const float* o_part,
                                  const float* da_diag, const float* e_part, const float* dd_part, float* fin_part) {
  const Dims& d = a.d;
  const int64_t c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * d.H + h, t0 = c * d.Q;
  const int k = int(threadIdx.x), Q = d.Q;
  const int64_t t = t0 + k;
  const bool valid = t < d.T;
  __shared__ float red[32], s_o[kMaxQ], s_z[kMaxQ];
  float xr = 0.0f, z = 0.0f, o = 0.0f;
  if (valid) {
    for (int pt = 0; pt < d.pt; ++pt) {
      const float* part = row_part + (bh * kRowParts * d.pt + pt) * d.TQ() + t;
      xr += part[0];
      z += part[d.pt * d.TQ()];
    }
    for (int nt = 0; nt < d.nt; ++nt) o += o_part[(bh * d.nt + nt) * d.TQ() + t];
  }
  s_o[k] = o;
  __syncthreads();
  const float suffix = block_prefix(s_o[Q - 1 - k], red);  // sum_{i >= Q-1-k} o_i
  const float prefix = block_prefix(z, red);               // sum_{j <= k} z_j
  __syncthreads();
  s_o[Q - 1 - k] = suffix;
  s_z[k] = prefix;
  __syncthreads();
  float e = 0.0f;
  for (int tile = 0; tile < d.pt * d.nt; ++tile) e += e_part[(bh * d.nC + c) * (d.pt * d.nt) + tile];
  const float da = (valid ? da_diag[bh * d.TQ() + t] : 0.0f) + s_o[k] + (k > 0 ? s_z[k - 1] : 0.0f) + e;
  const float A = -expf(a.A_log[h]), dt = a.dt[bh * d.TQ() + t];
  float draw = 0.0f;
  if (valid) {
    const int64_t row = b * d.T + t;
    draw = (xr + A * da) * sigmoid(to_float(a.dt_raw[row * d.ldt + h]) + a.dt_bias[h]);
    ddt_raw[row * lddt + h] = from_float<T>(draw);
  }
  const float sum_draw = block_prefix(draw, red);
  const float sum_da_dt = block_prefix(valid ? da * dt : 0.0f, red);
  if (k == Q - 1) {
    float dd = 0.0f;
    for (int pt = 0; pt < d.pt; ++pt) dd += dd_part[(bh * d.nC + c) * d.pt + pt];
    float* f = fin_part + (bh * d.nC + c) * 3;
    f[0] = sum_draw;
    f[1] = A * sum_da_dt;
    f[2] = dd;
  }
}

// grad[k][h] += the sum over (b, chunk) of fin_part[b][h][c][k] (ddt_bias, dA_log, dD): one warp per h,
// lane l adding items l, l + 32, ... in order, then a fixed shuffle tree; fp64.
__global__ void ssd_param_kernel(float* ddt_bias, float* dA_log, float* dD, const float* fin_part, int64_t B, int64_t H,
                                 int64_t nC) {
  const int64_t h = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (h >= H) return;  // whole warps
  const int lane = lane_id();
  float* grads[3] = {ddt_bias, dA_log, dD};
  for (int k = 0; k < 3; ++k) {
    double sum = 0.0;
    for (int64_t i = lane; i < B * nC; i += 32) sum += fin_part[(((i / nC) * H + h) * nC + i % nC) * 3 + k];
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) grads[k][h] = float(double(grads[k][h]) + sum);
  }
}

// Gradients into dx, ddt_raw, dB, dC (=) and the parameter gradients (+=).
template <class T>
void backward(Exec& ex, const Args<T>& a, T* dx, T* ddt_raw, int64_t lddt, T* dB, T* dC, float* ddt_bias, float* dA_log,
              float* dD) {
  const Dims& d = a.d;
  cudaStream_t s = stream_of(ex);
  const Device cu = Device::CUDA;
  if (!a.kept) {  // else the forward's dt, cum and states are here
    launch_dt(ex, a);
    launch_scan(ex, a, false, nullptr);
  }
  launch_cb(ex, a, true);
  Tensor e_part = Tensor::empty({d.B, d.H, d.nC, d.pt * d.nt}, DType::F32, cu);  // (B,H,nC,tiles)
  launch_scan(ex, a, true, e_part.data<float>());
  Tensor da_diag = Tensor::empty({d.B, d.H, d.TQ()}, DType::F32, cu);       // (B,H,T')
  Tensor o_part = Tensor::empty({d.B, d.H, d.nt, d.TQ()}, DType::F32, cu);  // (B,H,nt,T')
  launch_bc(ex, a, dC, dB, da_diag.data<float>(), o_part.data<float>());
  Tensor row_part = Tensor::empty({d.B, d.H, kRowParts, d.pt, d.TQ()}, DType::F32, cu);  // (B,H,2,pt,T')
  Tensor dd_part = Tensor::empty({d.B, d.H, d.nC, d.pt}, DType::F32, cu);                // (B,H,nC,pt)
  const int64_t smem = dx_smem(d, sizeof(T));
  allow_smem(&ssd_dx_kernel<T>, smem, "ssd_dx_kernel smem");
  ssd_dx_kernel<T><<<dim3(unsigned(d.pt * d.H), unsigned(d.nC), unsigned(d.B)), 2 * d.Q, size_t(smem), s>>>(
      a, dx, row_part.data<float>(), dd_part.data<float>());
  check_launch("ssd_dx_kernel");
  Tensor fin_part = Tensor::empty({d.B, d.H, d.nC, 3}, DType::F32, cu);  // (B,H,nC,3)
  ssd_finish_kernel<T><<<dim3(unsigned(d.nC), unsigned(d.H), unsigned(d.B)), d.Q, 0, s>>>(
      a, ddt_raw, lddt, row_part.data<float>(), o_part.data<float>(), da_diag.data<float>(), e_part.data<float>(),
      dd_part.data<float>(), fin_part.data<float>());
  check_launch("ssd_finish_kernel");
  constexpr int warps = kParamThreads / 32;
  ssd_param_kernel<<<unsigned((d.H + warps - 1) / warps), kParamThreads, 0, s>>>(
      ddt_bias, dA_log, dD, fin_part.data<float>(), d.B, d.H, d.nC);
  check_launch("ssd_param_kernel");
}

}  // namespace
}  // namespace hytra::cuda::ssd

namespace hytra::cuda {

void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log,
                        Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm,
                        const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D,
                        int64_t chunk_size, const std::vector<Tensor>* kept) {
  ssd::with_args("ssd_chunk_scan_bwd", x, dt_raw, Bm, Cm, dt_bias, A_log, D, &dy, chunk_size, nullptr, kept,
                 [&](auto& a) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(a.x)>>;
    ssd::backward(ex, a, static_cast<T*>(dx.raw()), static_cast<T*>(ddt_raw.raw()), ddt_raw.row_pitch(),
                  static_cast<T*>(dB.raw()), static_cast<T*>(dC.raw()), ddt_bias.data<float>(), dA_log.data<float>(),
                  dD.data<float>());
  });
}

}  // namespace hytra::cuda
