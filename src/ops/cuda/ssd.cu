// Mamba-2 SSD scan, forward and backward (ops.h "SSD"; SPEC.md A8.1 steps 3-4): plain sequential-
// in-time kernels, correct and deterministic, not tuned. Per batch b and head h (group g):
//   dt_t = softplus(dt_raw_t + dt_bias[h]), A = -exp(A_log[h]), a_t = dt_t A,
//   S_t = exp(a_t) S_{t-1} + dt_t x_t B_t^T (S: P x N),  y_t = S_t C_t + D[h] x_t.
// The recurrence is run step by step in fp32, which equals the chunked form up to rounding, so
// chunk_size does not enter. Backward, with G_t = dL/dS_t = exp(a_{t+1}) G_{t+1} + dy_t C_t^T:
//   dx_t = dt_t G_t B_t + D dy_t,  dB_t = sum_h dt_t G_t^T x_t,  dC_t = sum_h S_t^T dy_t,
//   ddt_raw_t = (r_t + A da_t) sigmoid(dt_raw_t + dt_bias),  r_t = x_t^T G_t B_t,
//   da_t = exp(a_t) <G_t, S_{t-1}> = sum_{i >= t} (q_i - dt_i r_i),  q_i = dy_i . S_i C_i,
// the last identity (expand S and G as sums over steps; the terms of da_t are the (i >= t > j)
// pairs) lets da come from per-step scalars of a forward (S) and a reverse (G) sweep that never
// meet, so no state is stored or recomputed.
//
// Scan kernels: one block per (b, h) walks time in tiles staged in shared memory (dt, decay and the
// step's x / dy / B / C rows); the P x N state lives in registers. Two layouts, chosen by which
// index the per-step output reduces over, so each reduction is one warp's:
//   rows kernel (lanes over n, warps over p): out_t[p] = sum_n M[p,n] w_t[n]      -> y, dx
//   cols kernel (lanes over p, warps over n): out_t[n] = sum_p M[p,n] w_t[p]      -> S^T dy, G^T x
// M is S (forward: M = exp(a_t) M + dt_t x_t B_t^T) or G (reverse: M = exp(a_{t+1}) M + dy_t C_t^T).
// Backward: cols forward (S^T dy per head, and sum_t dy.x) -> head reduce (dC, q) -> cols reverse
// (G^T x) -> head reduce (dB, r) -> rows reverse (dx) -> dt kernel (warp scan for da, ddt_raw) ->
// parameter sums. Head sums go over the group's heads in order, parameter sums per (b, h) then over
// b in order: no atomics. Scratch: one (B,T,H,N) fp32 buffer, reused by the two cols sweeps.
// Limits: P <= 128, N <= 256.
#include <cmath>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kRowsPerWarp = 4;        // rows kernel: state rows per warp, so P <= 32 * 4
constexpr int kColsPerWarp = 8;        // cols kernel: state columns per warp, so N <= 32 * 8
constexpr int kMaxP = 32 * kRowsPerWarp;
constexpr int kMaxN = 32 * kColsPerWarp;
constexpr int kSmemBytes = 40 * 1024;  // staged tile, under the 48 KiB default
constexpr int kMaxTile = 64;           // steps per tile
constexpr int kSmallThreads = 256;     // head reduce, dt and parameter kernels

// Everything a kernel needs about one call. The scan kernels read u (P-side: x or dy), v (N-side:
// B or C) and w (the reduce weights), all in `dtype`.
struct ScanArgs {
  const void* u = nullptr;  // (B,T,H,P)
  const void* v = nullptr;  // (B,T,G,N)
  const void* w = nullptr;  // (B,T,G,N) for the rows kernel, (B,T,H,P) for the cols kernel
  const void* dt_raw = nullptr;  // (B,T,H)
  DType dtype = DType::F32;
  const float* dt_bias = nullptr;  // (H)
  const float* A_log = nullptr;    // (H)
  const float* D = nullptr;        // (H)
  void* out = nullptr;  // rows: (B,T,H,P) in dtype; cols: (B,T,H,N) fp32
  DType out_dtype = DType::F32;
  float* dd_part = nullptr;  // cols kernel: (B,H) sum_t u_t . w_t (= dy . x), or null
  int64_t B = 0, T = 0, H = 0, G = 0, P = 0, N = 0;
  int tile = 1;
  bool reverse = false;
};

__device__ __forceinline__ float softplus_f(float z) { return fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z))); }

__device__ __forceinline__ float dt_at(const ScanArgs& a, int64_t b, int64_t t, int64_t h) {
  return softplus_f(load_f(a.dt_raw, a.dtype, (b * a.T + t) * a.H + h) + a.dt_bias[h]);
}

// dst[s][c] (row pitch `pitch`, c >= width zero) = row (b, t0 + s, head) of a (B,T,heads,width) tensor.
__device__ void stage_rows(float* dst, int pitch, const void* src, DType dtype, int64_t b, int64_t T, int64_t t0,
                           int len, int64_t heads, int64_t head, int64_t width) {
  for (int i = threadIdx.x; i < len * pitch; i += blockDim.x) {
    const int s = i / pitch, c = i % pitch;
    dst[i] = c < width ? load_f(src, dtype, ((b * T + t0 + s) * heads + head) * width + c) : 0.0f;
  }
}

// dt and the decay applied before step t's update: exp(a_t) forward; exp(a_{t+1}) reverse (0 at
// T-1, where G starts from nothing).
__device__ void stage_steps(float* s_dt, float* s_dec, const ScanArgs& a, int64_t b, int64_t h, int64_t t0, int len) {
  const float A = -expf(a.A_log[h]);
  for (int s = threadIdx.x; s < len; s += blockDim.x) {
    const int64_t t = t0 + s;
    s_dt[s] = dt_at(a, b, t, h);
    if (!a.reverse)
      s_dec[s] = expf(s_dt[s] * A);
    else
      s_dec[s] = t + 1 < a.T ? expf(dt_at(a, b, t + 1, h) * A) : 0.0f;
  }
}

// Tile k of the walk: steps [t0, t0 + len), tiles taken from the end when reversed.
__device__ __forceinline__ void tile_range(const ScanArgs& a, int64_t k, int64_t& t0, int& len) {
  const int64_t lo = a.reverse ? a.T - (k + 1) * a.tile : k * a.tile;
  t0 = lo < 0 ? 0 : lo;
  const int64_t hi = a.reverse ? a.T - k * a.tile : (t0 + a.tile < a.T ? t0 + a.tile : a.T);
  len = int(hi - t0);
}

// Rows kernel: warp w holds rows p = w + r * warps (r < kRowsPerWarp), lane l columns l + 32 k.
// out_t[p] = c_t sum_n M[p,n] w_t[n] + D u_t[p], c_t = 1 forward (y), dt_t reverse (dx).
template <int KN>
__global__ void __launch_bounds__(1024) ssd_scan_rows_kernel(ScanArgs a) {
  constexpr int NP = 32 * KN;
  extern __shared__ float sm[];
  float* s_dt = sm;                  // (tile)
  float* s_dec = s_dt + a.tile;      // (tile)
  float* s_u = s_dec + a.tile;       // (tile, P)
  float* s_v = s_u + a.tile * a.P;   // (tile, NP)
  float* s_w = s_v + a.tile * NP;    // (tile, NP)
  const int64_t h = blockIdx.x, b = blockIdx.y, g = h / (a.H / a.G);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float Dh = a.D[h];
  float M[kRowsPerWarp][KN] = {};  // (rows, KN)
  const int64_t tiles = (a.T + a.tile - 1) / a.tile;
  for (int64_t k = 0; k < tiles; ++k) {
    int64_t t0;
    int len;
    tile_range(a, k, t0, len);
    __syncthreads();  // the previous tile is consumed
    stage_steps(s_dt, s_dec, a, b, h, t0, len);
    stage_rows(s_u, int(a.P), a.u, a.dtype, b, a.T, t0, len, a.H, h, a.P);
    stage_rows(s_v, NP, a.v, a.dtype, b, a.T, t0, len, a.G, g, a.N);
    stage_rows(s_w, NP, a.w, a.dtype, b, a.T, t0, len, a.G, g, a.N);
    __syncthreads();
    for (int i = 0; i < len; ++i) {
      const int s = a.reverse ? len - 1 - i : i;
      const float dec = s_dec[s], scale_in = a.reverse ? 1.0f : s_dt[s], scale_out = a.reverse ? s_dt[s] : 1.0f;
      float vv[KN], ww[KN];
#pragma unroll
      for (int j = 0; j < KN; ++j) {
        vv[j] = s_v[s * NP + lane + 32 * j];
        ww[j] = s_w[s * NP + lane + 32 * j];
      }
      const int64_t out_row = ((b * a.T + t0 + s) * a.H + h) * a.P;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int p = warp + r * warps;
        if (p >= a.P) break;  // warp-uniform
        const float up = s_u[s * a.P + p], f = scale_in * up;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < KN; ++j) {
          M[r][j] = dec * M[r][j] + f * vv[j];
          acc += M[r][j] * ww[j];
        }
        acc = warp_sum(acc);
        if (lane == 0) store_f(a.out, a.out_dtype, out_row + p, scale_out * acc + Dh * up);
      }
    }
  }
}

// Cols kernel: warp w holds columns n = w + c * warps (c < kColsPerWarp), lane l rows l + 32 k.
// out_t[n] = sum_p M[p,n] w_t[p] (fp32); with dd_part, warp 0 also sums u_t . w_t over t.
template <int KP>
__global__ void __launch_bounds__(1024) ssd_scan_cols_kernel(ScanArgs a) {
  constexpr int PP = 32 * KP;
  extern __shared__ float sm[];
  float* s_dt = sm;                 // (tile)
  float* s_dec = s_dt + a.tile;     // (tile)
  float* s_u = s_dec + a.tile;      // (tile, PP)
  float* s_w = s_u + a.tile * PP;   // (tile, PP)
  float* s_v = s_w + a.tile * PP;   // (tile, N)
  const int64_t h = blockIdx.x, b = blockIdx.y, g = h / (a.H / a.G);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* out = static_cast<float*>(a.out);
  float M[kColsPerWarp][KP] = {};  // (cols, KP)
  float dd = 0.0f;
  const int64_t tiles = (a.T + a.tile - 1) / a.tile;
  for (int64_t k = 0; k < tiles; ++k) {
    int64_t t0;
    int len;
    tile_range(a, k, t0, len);
    __syncthreads();
    stage_steps(s_dt, s_dec, a, b, h, t0, len);
    stage_rows(s_u, PP, a.u, a.dtype, b, a.T, t0, len, a.H, h, a.P);
    stage_rows(s_w, PP, a.w, a.dtype, b, a.T, t0, len, a.H, h, a.P);
    stage_rows(s_v, int(a.N), a.v, a.dtype, b, a.T, t0, len, a.G, g, a.N);
    __syncthreads();
    for (int i = 0; i < len; ++i) {
      const int s = a.reverse ? len - 1 - i : i;
      const float dec = s_dec[s], scale_in = a.reverse ? 1.0f : s_dt[s];
      float uu[KP], ww[KP];
#pragma unroll
      for (int j = 0; j < KP; ++j) {
        uu[j] = s_u[s * PP + lane + 32 * j];
        ww[j] = s_w[s * PP + lane + 32 * j];
      }
      if (a.dd_part != nullptr && warp == 0) {
#pragma unroll
        for (int j = 0; j < KP; ++j) dd += uu[j] * ww[j];
      }
      const int64_t out_row = ((b * a.T + t0 + s) * a.H + h) * a.N;
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) {
        const int n = warp + c * warps;
        if (n >= a.N) break;  // warp-uniform
        const float f = scale_in * s_v[s * a.N + n];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < KP; ++j) {
          M[c][j] = dec * M[c][j] + f * uu[j];
          acc += M[c][j] * ww[j];
        }
        acc = warp_sum(acc);
        if (lane == 0) out[out_row + n] = acc;
      }
    }
  }
  if (a.dd_part != nullptr && warp == 0) {
    dd = warp_sum(dd);
    if (lane == 0) a.dd_part[b * a.H + h] = dd;
  }
}

// One warp per (b, t, g): out[b,t,g,:] = sum over the group's heads h, in order, of c_h buf[b,t,h,:]
// (c_h = dt of (b,t,h) when scale_dt, else 1), and dots[b,h,t] = w[b,t,g,:] . buf[b,t,h,:].
__global__ void ssd_head_reduce_kernel(ScanArgs a, void* out, float* dots, const float* buf, const void* w,
                                       bool scale_dt) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32), hpg = a.H / a.G;
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < a.B * a.T * a.G;
       row += warps) {
    const int64_t g = row % a.G, bt = row / a.G, b = bt / a.T, t = bt % a.T;
    for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      const float* bh = buf + (bt * a.H + h) * a.N;
      float d = 0.0f;
      for (int64_t n = lane; n < a.N; n += 32) d += load_f(w, a.dtype, row * a.N + n) * bh[n];
      d = warp_sum(d);
      if (lane == 0) dots[(b * a.H + h) * a.T + t] = d;
    }
    for (int64_t n = lane; n < a.N; n += 32) {
      float sum = 0.0f;
      for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h)
        sum += (scale_dt ? dt_at(a, b, t, h) : 1.0f) * buf[(bt * a.H + h) * a.N + n];
      store_f(out, a.dtype, row * a.N + n, sum);
    }
  }
}

// One warp per (b, h), over t in reverse, 32 steps at a time (lane l takes t = hi - 1 - l):
// da_t = carry + inclusive warp scan of e_i = q_i - dt_i r_i. Writes ddt_raw and the (b, h)
// partials part[0][b][h] (ddt_bias) and part[1][b][h] (dA_log = A sum_t da_t dt_t).
__global__ void ssd_dt_grad_kernel(ScanArgs a, void* ddt_raw, const float* q, const float* r, float* part) {
  const int lane = threadIdx.x % 32;
  const int64_t bh = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (bh >= a.B * a.H) return;  // whole warps
  const int64_t b = bh / a.H, h = bh % a.H;
  const float A = -expf(a.A_log[h]);
  float carry = 0.0f, sum_dz = 0.0f, sum_da_dt = 0.0f;
  for (int64_t hi = a.T; hi > 0; hi -= 32) {
    const int64_t t = hi - 1 - lane;
    float z = 0.0f, dt = 0.0f, rt = 0.0f, e = 0.0f;
    if (t >= 0) {
      z = load_f(a.dt_raw, a.dtype, (b * a.T + t) * a.H + h) + a.dt_bias[h];
      dt = softplus_f(z);
      rt = r[bh * a.T + t];
      e = q[bh * a.T + t] - dt * rt;
    }
    for (int o = 1; o < 32; o <<= 1) {
      const float up = __shfl_up_sync(0xffffffffu, e, o);
      if (lane >= o) e += up;
    }
    const float da = carry + e;
    carry += __shfl_sync(0xffffffffu, e, 31);
    if (t >= 0) {
      const float dz = (rt + A * da) / (1.0f + expf(-z));
      store_f(ddt_raw, a.dtype, (b * a.T + t) * a.H + h, dz);
      sum_dz += dz;
      sum_da_dt += da * dt;
    }
  }
  sum_dz = warp_sum(sum_dz);
  sum_da_dt = warp_sum(sum_da_dt);
  if (lane == 0) {
    part[bh] = sum_dz;
    part[a.B * a.H + bh] = A * sum_da_dt;
  }
}

// grad_k[h] += sum over b, in order, of part[k][b][h]; k = ddt_bias, dA_log, dD.
__global__ void ssd_param_grad_kernel(float* ddt_bias, float* dA_log, float* dD, const float* part, int64_t B,
                                      int64_t H) {
  const int64_t h = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h >= H) return;
  float* grads[3] = {ddt_bias, dA_log, dD};
  for (int k = 0; k < 3; ++k) {
    float sum = 0.0f;
    for (int64_t b = 0; b < B; ++b) sum += part[(k * B + b) * H + h];
    grads[k][h] += sum;
  }
}

// Calls f(integral_constant<K>) with the smallest K in 1, 2, 4, ..., kMax with len <= 32 K: the
// slots per lane of a length spread over a warp's lanes.
template <int kMax, int K = 1, class F>
void with_slots(int64_t len, F&& f) {
  if constexpr (K < kMax) {
    if (len > 32 * K) return with_slots<kMax, 2 * K>(len, f);
  }
  f(std::integral_constant<int, K>{});
}

int tile_for(int64_t floats_per_step) {
  const int64_t t = kSmemBytes / (int64_t(sizeof(float)) * floats_per_step);
  return int(t < 1 ? 1 : (t > kMaxTile ? kMaxTile : t));
}

// Rows kernel over all (b, h): y (forward) or dx (reverse).
void launch_rows(Exec& ex, ScanArgs a) {
  const int threads = 32 * int((a.P + kRowsPerWarp - 1) / kRowsPerWarp);
  with_slots<kMaxN / 32>(a.N, [&](auto kn) {
    constexpr int KN = decltype(kn)::value;
    a.tile = tile_for(2 + a.P + 2 * 32 * KN);
    const size_t smem = sizeof(float) * size_t(a.tile) * size_t(2 + a.P + 2 * 32 * KN);
    ssd_scan_rows_kernel<KN><<<dim3(unsigned(a.H), unsigned(a.B)), threads, smem, stream_of(ex)>>>(a);
  });
  check_launch("ssd_scan_rows_kernel");
}

// Cols kernel over all (b, h): S^T dy (forward) or G^T x (reverse), fp32 (B,T,H,N).
void launch_cols(Exec& ex, ScanArgs a) {
  const int threads = 32 * int((a.N + kColsPerWarp - 1) / kColsPerWarp);
  with_slots<kMaxP / 32>(a.P, [&](auto kp) {
    constexpr int KP = decltype(kp)::value;
    a.tile = tile_for(2 + 2 * 32 * KP + a.N);
    const size_t smem = sizeof(float) * size_t(a.tile) * size_t(2 + 2 * 32 * KP + a.N);
    ssd_scan_cols_kernel<KP><<<dim3(unsigned(a.H), unsigned(a.B)), threads, smem, stream_of(ex)>>>(a);
  });
  check_launch("ssd_scan_cols_kernel");
}

void launch_head_reduce(Exec& ex, const ScanArgs& a, Tensor& out, Tensor& dots, const Tensor& buf, const Tensor& w,
                        bool scale_dt) {
  const int64_t warps = a.B * a.T * a.G;
  ssd_head_reduce_kernel<<<grid_for(warps * 32, kSmallThreads), kSmallThreads, 0, stream_of(ex)>>>(
      a, out.raw(), dots.data<float>(), buf.data<float>(), w.raw(), scale_dt);
  check_launch("ssd_head_reduce_kernel");
}

// The arguments shared by every kernel of one call.
ScanArgs base_args(const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& dt_bias, const Tensor& A_log,
                   const Tensor& D) {
  ScanArgs a;
  a.dt_raw = dt_raw.raw();
  a.dtype = x.dtype();
  a.dt_bias = dt_bias.data<float>();
  a.A_log = A_log.data<float>();
  a.D = D.data<float>();
  a.B = x.size(0);
  a.T = x.size(1);
  a.H = x.size(2);
  a.G = Bm.size(2);
  a.P = x.size(3);
  a.N = Bm.size(3);
  return a;
}

void check_supported(const char* op, const Tensor& x, const Tensor& Bm) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", x.desc());
  HYTRA_CHECK(x.size(3) >= 1 && x.size(3) <= kMaxP && Bm.size(3) >= 1 && Bm.size(3) <= kMaxN, op,
              " on CUDA: supports head dim 1 <= P <= ", kMaxP, " and state 1 <= N <= ", kMaxN, ", got P = ",
              x.size(3), ", N = ", Bm.size(3));
  HYTRA_CHECK(x.size(0) <= 65535, op, " on CUDA: batch ", x.size(0), " exceeds the grid");
}

}  // namespace

void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                        const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t) {
  check_supported("ssd_chunk_scan_fwd", x, Bm);
  if (x.numel() == 0) return;
  ScanArgs a = base_args(x, dt_raw, Bm, dt_bias, A_log, D);
  a.u = x.raw();
  a.v = Bm.raw();
  a.w = Cm.raw();
  a.out = y.raw();
  a.out_dtype = y.dtype();
  launch_rows(ex, a);
}

void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias,
                        Tensor& dA_log, Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw,
                        const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log,
                        const Tensor& D, int64_t) {
  check_supported("ssd_chunk_scan_bwd", x, Bm);
  if (x.numel() == 0) return;
  const ScanArgs base = base_args(x, dt_raw, Bm, dt_bias, A_log, D);
  const int64_t B = base.B, T = base.T, H = base.H, N = base.N;
  Tensor buf = Tensor::empty({B, T, H, N}, DType::F32, Device::CUDA);  // (B,T,H,N): S^T dy, then G^T x
  Tensor q = Tensor::empty({B, H, T}, DType::F32, Device::CUDA);       // (B,H,T): dy_t . S_t C_t
  Tensor r = Tensor::empty({B, H, T}, DType::F32, Device::CUDA);       // (B,H,T): x_t^T G_t B_t
  Tensor part = Tensor::empty({3, B, H}, DType::F32, Device::CUDA);    // (3,B,H): ddt_bias, dA_log, dD sums

  ScanArgs fwd = base;  // S sweep: S^T dy per head, and sum_t dy . x
  fwd.u = x.raw();
  fwd.v = Bm.raw();
  fwd.w = dy.raw();
  fwd.out = buf.raw();
  fwd.dd_part = part.data<float>() + 2 * B * H;
  launch_cols(ex, fwd);
  launch_head_reduce(ex, base, dC, q, buf, Cm, false);

  ScanArgs rev = base;  // G sweep: G^T x per head
  rev.reverse = true;
  rev.u = dy.raw();
  rev.v = Cm.raw();
  rev.w = x.raw();
  rev.out = buf.raw();
  launch_cols(ex, rev);
  launch_head_reduce(ex, base, dB, r, buf, Bm, true);

  rev.w = Bm.raw();  // G sweep: dx = dt G B + D dy
  rev.out = dx.raw();
  rev.out_dtype = dx.dtype();
  launch_rows(ex, rev);

  const int warps_per_block = kSmallThreads / 32;
  ssd_dt_grad_kernel<<<unsigned((B * H + warps_per_block - 1) / warps_per_block), kSmallThreads, 0, stream_of(ex)>>>(
      base, ddt_raw.raw(), q.data<float>(), r.data<float>(), part.data<float>());
  check_launch("ssd_dt_grad_kernel");
  ssd_param_grad_kernel<<<grid_for(H, kSmallThreads), kSmallThreads, 0, stream_of(ex)>>>(
      ddt_bias.data<float>(), dA_log.data<float>(), dD.data<float>(), part.data<float>(), B, H);
  check_launch("ssd_param_grad_kernel");
}

}  // namespace hytra::cuda
