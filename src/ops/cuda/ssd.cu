// Mamba-2 SSD scan, forward and backward (ops.h "SSD"; docs/spec/mamba_gdn.md §1 steps 3-4): plain sequential-
// in-time kernels, correct and deterministic, not tuned. Per batch b and head h (group g):
//   dt_t = softplus(dt_raw_t + dt_bias[h]), A = -exp(A_log[h]), a_t = dt_t A,
//   S_t = exp(a_t) S_{t-1} + dt_t x_t B_t^T (S: P x N),  y_t = S_t C_t + D[h] x_t.
// The recurrence runs step by step, which equals the chunked form up to rounding, so chunk_size
// does not enter. Backward, with G_t = dL/dS_t = exp(a_{t+1}) G_{t+1} + dy_t C_t^T:
//   dx_t = dt_t G_t B_t + D dy_t,  dB_t = sum_h dt_t G_t^T x_t,  dC_t = sum_h S_t^T dy_t,
//   ddt_raw_t = (r_t + A da_t) sigmoid(dt_raw_t + dt_bias),  r_t = x_t^T G_t B_t,
//   da_t = exp(a_t) <G_t, S_{t-1}> = sum_{i >= t} (q_i - dt_i r_i),  q_i = dy_i . S_i C_i.
// The last identity (expand S and G as sums over steps: both sides sum the (i >= t > j) pairs)
// lets da come from per-step scalars of a forward (S) and a reverse (G) sweep that never meet, so
// no state is stored or recomputed. Its suffix sums cancel terms that do not decay, so the rounding
// of q and r is never forgotten: with fp32 states dA_log was off by 1% at T = 1000 (H100 parity).
// The two sweeps that make q and r therefore keep S and G, and sum q, r and da, in fp64; dA_log then
// matches the fp32 CPU reference (which computes da directly) to ~1e-5.
//
// Scan kernels: one block per (b, h) walks time in tiles staged in shared memory (dt, decay and the
// step's x / dy / B / C rows); the P x N state lives in registers. Two layouts, chosen by which
// index the per-step output reduces over, so each reduction is one warp's:
//   rows kernel (lanes over n, warps over p; fp32): out_t[p] = sum_n M[p,n] w_t[n]   -> y, dx
//   cols kernel (lanes over p, warps over n; fp64): out_t[n] = sum_p M[p,n] w_t[p]   -> S^T dy, G^T x
//     and the scalar sum_n c_t[n] out_t[n] (q with c = C, r with c = B), its per-warp parts kept
//     per step of the tile and added in warp order after it.
// M is S (forward: M = exp(a_t) M + dt_t x_t B_t^T) or G (reverse: M = exp(a_{t+1}) M + dy_t C_t^T).
// Backward: cols forward (S^T dy, q, sum_t dy.x) -> head reduce (dC) -> cols reverse (G^T x, r) ->
// head reduce (dB) -> rows reverse (dx) -> dt kernel (warp scan for da, ddt_raw) -> parameter
// sums. Head sums go over the group's heads in order, parameter sums per (b, h) then over b in
// order: no atomics. Scratch: one (B,T,H,N) fp32 buffer, reused by the two cols sweeps.
// Limits: P <= 128, N <= 256 (with P > 64 and N > 128 the fp64 cols kernel spills registers).
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
constexpr int kStageBatch = 8;         // loads in flight per thread while staging
constexpr int kSmallThreads = 256;     // head reduce, dt and parameter kernels

// Everything a kernel needs about one call. The scan kernels read u (P-side: x or dy), v (N-side:
// B or C), w (the reduce weights) and c (cols kernel: the scalar's weights), all in `dtype`.
struct ScanArgs {
  const void* u = nullptr;       // (B,T,H,P)
  const void* v = nullptr;       // (B,T,G,N)
  const void* w = nullptr;       // (B,T,G,N) for the rows kernel, (B,T,H,P) for the cols kernel
  const void* c = nullptr;       // (B,T,G,N), cols kernel
  const void* dt_raw = nullptr;  // (B,T,H)
  DType dtype = DType::F32;
  const float* dt_bias = nullptr;  // (H)
  const float* A_log = nullptr;    // (H)
  const float* D = nullptr;        // (H)
  void* out = nullptr;             // rows: (B,T,H,P) in out_dtype; cols: (B,T,H,N) fp32
  DType out_dtype = DType::F32;
  double* scalar = nullptr;   // cols kernel: (B,H,T) sum_n c_t[n] out_t[n]
  double* dd_part = nullptr;  // cols kernel: (B,H) sum_t u_t . w_t (= dy . x), or null
  int64_t B = 0, T = 0, H = 0, G = 0, P = 0, N = 0;
  int tile = 1;
  bool reverse = false;
};

__device__ __forceinline__ float dt_at(const ScanArgs& a, int64_t b, int64_t t, int64_t h) {
  return softplus(load_f(a.dt_raw, a.dtype, (b * a.T + t) * a.H + h) + a.dt_bias[h]);
}

__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// dst[s][c] (row pitch `pitch`, c >= width zero) = row (b, t0 + s, head) of a (B,T,heads,width)
// tensor; each thread issues kStageBatch loads before storing any.
__device__ void stage_rows(float* dst, int pitch, const void* src, DType dtype, int64_t b, int64_t T, int64_t t0,
                           int len, int64_t heads, int64_t head, int64_t width) {
  const int total = len * pitch;
  for (int base = threadIdx.x; base < total; base += kStageBatch * blockDim.x) {
    float vals[kStageBatch];
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k) {
      const int i = base + k * blockDim.x, s = i / pitch, c = i % pitch;
      vals[k] = i < total && c < width ? load_f(src, dtype, ((b * T + t0 + s) * heads + head) * width + c) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k)
      if (base + k * blockDim.x < total) dst[base + k * blockDim.x] = vals[k];
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
// out_t[p] = c_t sum_n M[p,n] w_t[n] + D u_t[p], c_t = 1 forward (y), dt_t reverse (dx). Rows past
// P run on zeros (their stores skipped) so the rows' warp sums overlap.
template <int KN>
__global__ void __launch_bounds__(1024) ssd_scan_rows_kernel(ScanArgs a) {
  constexpr int NP = 32 * KN;
  extern __shared__ __align__(16) unsigned char ssd_smem[];
  float* s_dt = reinterpret_cast<float*>(ssd_smem);  // (tile)
  float* s_dec = s_dt + a.tile;                      // (tile)
  float* s_u = s_dec + a.tile;                       // (tile, P)
  float* s_v = s_u + a.tile * a.P;                   // (tile, NP)
  float* s_w = s_v + a.tile * NP;                    // (tile, NP)
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
        const float up = p < a.P ? s_u[s * a.P + p] : 0.0f, f = scale_in * up;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < KN; ++j) {
          M[r][j] = dec * M[r][j] + f * vv[j];
          acc += M[r][j] * ww[j];
        }
        acc = warp_sum(acc);
        if (lane == 0 && p < a.P) store_f(a.out, a.out_dtype, out_row + p, scale_out * acc + Dh * up);
      }
    }
  }
}

// Cols kernel, in fp64: warp w holds columns n = w + cc * warps (cc < kColsPerWarp), lane l rows
// l + 32 k. out_t[n] = sum_p M[p,n] w_t[p] (stored fp32); scalar_t = sum_n c_t[n] out_t[n]; with
// dd_part, warp 0 also sums u_t . w_t over t.
template <int KP, int kMaxThreads>
__global__ void __launch_bounds__(kMaxThreads) ssd_scan_cols_kernel(ScanArgs a) {
  constexpr int PP = 32 * KP;
  extern __shared__ __align__(16) unsigned char ssd_smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  double* s_part = reinterpret_cast<double*>(ssd_smem);           // (warps, tile)
  float* s_dt = reinterpret_cast<float*>(s_part + warps * a.tile);  // (tile)
  float* s_dec = s_dt + a.tile;                                     // (tile)
  float* s_u = s_dec + a.tile;                                      // (tile, PP)
  float* s_w = s_u + a.tile * PP;                                   // (tile, PP)
  float* s_v = s_w + a.tile * PP;                                   // (tile, N)
  float* s_c = s_v + a.tile * a.N;                                  // (tile, N)
  const int64_t h = blockIdx.x, b = blockIdx.y, g = h / (a.H / a.G), bh = b * a.H + h;
  float* out = static_cast<float*>(a.out);
  double M[kColsPerWarp][KP] = {};  // (cols, KP)
  double dd = 0.0;
  const int64_t tiles = (a.T + a.tile - 1) / a.tile;
  for (int64_t k = 0; k < tiles; ++k) {
    int64_t t0;
    int len;
    tile_range(a, k, t0, len);
    __syncthreads();  // the previous tile and its parts are consumed
    stage_steps(s_dt, s_dec, a, b, h, t0, len);
    stage_rows(s_u, PP, a.u, a.dtype, b, a.T, t0, len, a.H, h, a.P);
    stage_rows(s_w, PP, a.w, a.dtype, b, a.T, t0, len, a.H, h, a.P);
    stage_rows(s_v, int(a.N), a.v, a.dtype, b, a.T, t0, len, a.G, g, a.N);
    stage_rows(s_c, int(a.N), a.c, a.dtype, b, a.T, t0, len, a.G, g, a.N);
    __syncthreads();
    for (int i = 0; i < len; ++i) {
      const int s = a.reverse ? len - 1 - i : i;
      const double dec = s_dec[s], scale_in = a.reverse ? 1.0f : s_dt[s];
      double uu[KP], ww[KP];
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
      double part = 0.0;
#pragma unroll
      for (int cc = 0; cc < kColsPerWarp; ++cc) {
        const int n = warp + cc * warps;
        const bool on = n < a.N;  // warp-uniform; columns past N run on zeros
        const double f = on ? scale_in * double(s_v[s * a.N + n]) : 0.0;
        double acc = 0.0;
#pragma unroll
        for (int j = 0; j < KP; ++j) {
          M[cc][j] = dec * M[cc][j] + f * uu[j];
          acc += M[cc][j] * ww[j];
        }
        acc = warp_sum_d(acc);
        if (on) {
          part += double(s_c[s * a.N + n]) * acc;
          if (lane == 0) out[out_row + n] = float(acc);
        }
      }
      if (lane == 0) s_part[warp * a.tile + s] = part;
    }
    __syncthreads();
    for (int s = threadIdx.x; s < len; s += blockDim.x) {
      double total = 0.0;
      for (int w = 0; w < warps; ++w) total += s_part[w * a.tile + s];
      a.scalar[bh * a.T + t0 + s] = total;
    }
  }
  if (a.dd_part != nullptr && warp == 0) {
    dd = warp_sum_d(dd);
    if (lane == 0) a.dd_part[bh] = dd;
  }
}

// One warp per (b, t, g): out[b,t,g,:] = sum over the group's heads h, in order, of c_h buf[b,t,h,:]
// (c_h = dt of (b,t,h) when scale_dt, else 1).
__global__ void ssd_head_reduce_kernel(ScanArgs a, void* out, const float* buf, bool scale_dt) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32), hpg = a.H / a.G;
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < a.B * a.T * a.G;
       row += warps) {
    const int64_t g = row % a.G, bt = row / a.G, b = bt / a.T, t = bt % a.T;
    for (int64_t n = lane; n < a.N; n += 32) {
      float sum = 0.0f;
      for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h)
        sum += (scale_dt ? dt_at(a, b, t, h) : 1.0f) * buf[(bt * a.H + h) * a.N + n];
      store_f(out, a.dtype, row * a.N + n, sum);
    }
  }
}

// One warp per (b, h), over t in reverse, 32 steps at a time (lane l takes t = hi - 1 - l), in
// fp64: da_t = carry + inclusive warp scan of e_i = q_i - dt_i r_i. Writes ddt_raw and the (b, h)
// partials part[0][b][h] (ddt_bias) and part[1][b][h] (dA_log = A sum_t da_t dt_t).
__global__ void ssd_dt_grad_kernel(ScanArgs a, void* ddt_raw, const double* q, const double* r, double* part) {
  const int lane = threadIdx.x % 32;
  const int64_t bh = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (bh >= a.B * a.H) return;  // whole warps
  const int64_t b = bh / a.H, h = bh % a.H;
  const float A = -expf(a.A_log[h]);
  double carry = 0.0, sum_dz = 0.0, sum_da_dt = 0.0;
  for (int64_t hi = a.T; hi > 0; hi -= 32) {
    const int64_t t = hi - 1 - lane;
    float z = 0.0f, dt = 0.0f;
    double rt = 0.0, e = 0.0;
    if (t >= 0) {
      z = load_f(a.dt_raw, a.dtype, (b * a.T + t) * a.H + h) + a.dt_bias[h];
      dt = softplus(z);
      rt = r[bh * a.T + t];
      e = q[bh * a.T + t] - double(dt) * rt;
    }
    for (int o = 1; o < 32; o <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, e, o);
      if (lane >= o) e += up;
    }
    const double da = carry + e;
    carry += __shfl_sync(0xffffffffu, e, 31);
    if (t >= 0) {
      const double dz = (rt + double(A) * da) / (1.0 + exp(-double(z)));
      store_f(ddt_raw, a.dtype, (b * a.T + t) * a.H + h, float(dz));
      sum_dz += dz;
      sum_da_dt += da * dt;
    }
  }
  sum_dz = warp_sum_d(sum_dz);
  sum_da_dt = warp_sum_d(sum_da_dt);
  if (lane == 0) {
    part[bh] = sum_dz;
    part[a.B * a.H + bh] = double(A) * sum_da_dt;
  }
}

// grad_k[h] += sum over b, in order, of part[k][b][h]; k = ddt_bias, dA_log, dD.
__global__ void ssd_param_grad_kernel(float* ddt_bias, float* dA_log, float* dD, const double* part, int64_t B,
                                      int64_t H) {
  const int64_t h = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h >= H) return;
  float* grads[3] = {ddt_bias, dA_log, dD};
  for (int k = 0; k < 3; ++k) {
    double sum = 0.0;
    for (int64_t b = 0; b < B; ++b) sum += part[(k * B + b) * H + h];
    grads[k][h] = float(double(grads[k][h]) + sum);
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

int tile_for(int64_t bytes_per_step) {
  const int64_t t = kSmemBytes / bytes_per_step;
  return int(t < 1 ? 1 : (t > kMaxTile ? kMaxTile : t));
}

// Rows kernel over all (b, h): y (forward) or dx (reverse).
void launch_rows(Exec& ex, ScanArgs a) {
  const int threads = 32 * int((a.P + kRowsPerWarp - 1) / kRowsPerWarp);
  with_slots<kMaxN / 32>(a.N, [&](auto kn) {
    constexpr int KN = decltype(kn)::value;
    const int64_t step_bytes = int64_t(sizeof(float)) * (2 + a.P + 2 * 32 * KN);
    a.tile = tile_for(step_bytes);
    ssd_scan_rows_kernel<KN><<<dim3(unsigned(a.H), unsigned(a.B)), threads, size_t(a.tile * step_bytes),
                               stream_of(ex)>>>(a);
  });
  check_launch("ssd_scan_rows_kernel");
}

// Cols kernel over all (b, h): S^T dy and q (forward) or G^T x and r (reverse).
void launch_cols(Exec& ex, ScanArgs a) {
  const int warps = int((a.N + kColsPerWarp - 1) / kColsPerWarp), threads = 32 * warps;
  with_slots<kMaxP / 32>(a.P, [&](auto kp) {
    constexpr int KP = decltype(kp)::value;
    const int64_t step_bytes = int64_t(sizeof(double)) * warps + int64_t(sizeof(float)) * (2 + 2 * 32 * KP + 2 * a.N);
    a.tile = tile_for(step_bytes);
    const dim3 grid(unsigned(a.H), unsigned(a.B));
    const size_t smem = size_t(a.tile * step_bytes);
    if (threads <= 512)
      ssd_scan_cols_kernel<KP, 512><<<grid, threads, smem, stream_of(ex)>>>(a);
    else
      ssd_scan_cols_kernel<KP, 1024><<<grid, threads, smem, stream_of(ex)>>>(a);
  });
  check_launch("ssd_scan_cols_kernel");
}

void launch_head_reduce(Exec& ex, const ScanArgs& a, Tensor& out, const Tensor& buf, bool scale_dt) {
  const int64_t warps = a.B * a.T * a.G;
  ssd_head_reduce_kernel<<<grid_for(warps * 32, kSmallThreads), kSmallThreads, 0, stream_of(ex)>>>(
      a, out.raw(), buf.data<float>(), scale_dt);
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
  Tensor q = Tensor::empty({B, H, T}, DType::F64, Device::CUDA);       // (B,H,T): dy_t . S_t C_t
  Tensor r = Tensor::empty({B, H, T}, DType::F64, Device::CUDA);       // (B,H,T): x_t^T G_t B_t
  Tensor part = Tensor::empty({3, B, H}, DType::F64, Device::CUDA);    // (3,B,H): ddt_bias, dA_log, dD sums

  ScanArgs fwd = base;  // S sweep: S^T dy, q, and sum_t dy . x
  fwd.u = x.raw();
  fwd.v = Bm.raw();
  fwd.w = dy.raw();
  fwd.c = Cm.raw();
  fwd.out = buf.raw();
  fwd.scalar = q.data<double>();
  fwd.dd_part = part.data<double>() + 2 * B * H;
  launch_cols(ex, fwd);
  launch_head_reduce(ex, base, dC, buf, false);

  ScanArgs rev = base;  // G sweep: G^T x and r
  rev.reverse = true;
  rev.u = dy.raw();
  rev.v = Cm.raw();
  rev.w = x.raw();
  rev.c = Bm.raw();
  rev.out = buf.raw();
  rev.scalar = r.data<double>();
  launch_cols(ex, rev);
  launch_head_reduce(ex, base, dB, buf, true);

  rev.w = Bm.raw();  // G sweep: dx = dt G B + D dy
  rev.out = dx.raw();
  rev.out_dtype = dx.dtype();
  launch_rows(ex, rev);

  const int warps_per_block = kSmallThreads / 32;
  ssd_dt_grad_kernel<<<unsigned((B * H + warps_per_block - 1) / warps_per_block), kSmallThreads, 0, stream_of(ex)>>>(
      base, ddt_raw.raw(), q.data<double>(), r.data<double>(), part.data<double>());
  check_launch("ssd_dt_grad_kernel");
  ssd_param_grad_kernel<<<grid_for(H, kSmallThreads), kSmallThreads, 0, stream_of(ex)>>>(
      ddt_bias.data<float>(), dA_log.data<float>(), dD.data<float>(), part.data<double>(), B, H);
  check_launch("ssd_param_grad_kernel");
}

}  // namespace hytra::cuda
