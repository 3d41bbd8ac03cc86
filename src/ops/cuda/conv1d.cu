// Causal depthwise conv1d over time, forward and backward (ops.h "causal depthwise conv1d"; docs/spec/mamba_gdn.md
// §1 step 2, §2 step 2), math in fp32:
//   p[b,t,c] = bias[c] + sum_{j<K} w[c,j] * x[b, t-(K-1)+j, c];   y = silu(p) or p
//   g = dy * silu'(p) (or dy);   dx[b,s,c] = sum_{j<K} w[c,j] * g[b, s+(K-1)-j, c]
//   dw[c,j] += sum_{b,t} g[b,t,c] * x[b, t-(K-1)+j, c];   dbias[c] += sum_{b,t} g[b,t,c]
// Thread layout (both kernels): a block is kLanes threads along channels (each owning V adjacent
// channels: V = kConvVec when C and the pointers allow, else V = 1; 4 channels, not a 16-byte
// vector of bf16, keep the backward's windows and sums in registers) times Steps threads along
// time, each walking a tile of consecutive time steps with the last K-1 inputs (and, backward, the
// last K-1 values of g) in registers, so every x and dy is read from memory about once. A thread
// issues the loads of a batch of steps together before using them (the kernels are latency bound
// otherwise: one dependent load per step); SiLU takes fast_sigmoid, as the batched kernels are
// issue bound on the full-precision one.
// The backward walks K-1 steps past its tile to finish dx at the tile's end (g recomputed from x
// and dy: no saved pre-activation); its tile is kBwdBatches * kBwdBatch - (K-1) steps, so the walk is
// whole batches. Its weight gradients are deterministic without atomics: each block adds its
// threads' sums over time in thread order into one fp32 partial per (batch, time tile) chunk, and
// a second kernel adds the chunks in a fixed order (chunk_sum). K is a template parameter
// (2..4, causal-conv1d's range) so the windows stay in registers; other widths are a named error
// here (the CPU reference takes any K). Activations are row-pitched: row (b, t) of x starts at
// (b T + t) ldx, so x can be a column range of a wider tensor (the Mamba in_proj output), read in place.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kLanes = 32;      // threads along channels (a warp reads consecutive vectors)
constexpr int kConvVec = 4;     // channels per thread on the vector path (8 bytes of bf16, 16 of fp32)
constexpr int kFwdSteps = 8;    // forward: threads along time
constexpr int kFwdBatch = 16;   // forward: time steps whose loads a thread issues together
constexpr int kFwdTile = 32;    // forward: time steps per thread (a multiple of kFwdBatch)
constexpr int kBwdSteps = 4;    // backward: threads along time (fewer: more registers each)
constexpr int kBwdBatch = 8;    // backward: time steps whose loads a thread issues together
constexpr int kBwdBatches = 4;  // backward: batches per thread

// Backward time steps per thread for width K (its walk of tile + K-1 steps is kBwdBatches batches).
template <int K>
constexpr int kBwdTile = kBwdBatches * kBwdBatch - (K - 1);

// w[c0 .. c0+V, 0..K) and bias[c0 .. c0+V) as fp32 (read once per thread).
template <int K, int V, class T>
__device__ __forceinline__ void load_params(const T* w, const T* bias, int64_t c0, float (&wr)[K][V], float (&br)[V]) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
    br[e] = float(bias[c0 + e]);
#pragma unroll
    for (int j = 0; j < K; ++j) wr[j][e] = float(w[(c0 + e) * K + j]);
  }
}

// Grid (channel-vector blocks, time tiles, B); block (kLanes, kFwdSteps).
template <class T, int K, int V>
__global__ void __launch_bounds__(kLanes* kFwdSteps)
    conv1d_fwd_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                      int64_t T_len, int64_t C, int64_t ldy, int64_t ldx, bool silu) {
  const int64_t c0 = (int64_t(blockIdx.x) * kLanes + threadIdx.x) * V;
  if (c0 >= C) return;
  const int64_t t0 = (int64_t(blockIdx.y) * kFwdSteps + threadIdx.y) * kFwdTile;
  const int64_t t1 = min(T_len, t0 + kFwdTile);
  const int64_t row0 = int64_t(blockIdx.z) * T_len;  // row of (b, 0)
  x += row0 * ldx + c0;
  y += row0 * ldy + c0;
  float wr[K][V], br[V];
  load_params<K, V>(w, bias, c0, wr, br);
  float win[K - 1][V];  // x[t-(K-1) .. t-1]
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int64_t ts = t0 - (K - 1) + j;
    unpack_v<V, T>(ts >= 0 && ts < T_len ? load_packed<V>(x + ts * ldx) : Packed<T, V>{}, win[j]);
  }
  for (int64_t tb = t0; tb < t1; tb += kFwdBatch) {
    Packed<T, V> xr[kFwdBatch];
#pragma unroll
    for (int i = 0; i < kFwdBatch; ++i) xr[i] = tb + i < t1 ? load_packed<V>(x + (tb + i) * ldx) : Packed<T, V>{};
#pragma unroll
    for (int i = 0; i < kFwdBatch; ++i) {
      if (tb + i >= t1) break;
      float cur[V], out[V];
      unpack_v<V, T>(xr[i], cur);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float p = br[e];
#pragma unroll
        for (int j = 0; j < K - 1; ++j) p += wr[j][e] * win[j][e];
        p += wr[K - 1][e] * cur[e];
        out[e] = silu ? p * fast_sigmoid(p) : p;
      }
      store_packed<V>(y + (tb + i) * ldy, out);
#pragma unroll
      for (int e = 0; e < V; ++e) {
#pragma unroll
        for (int j = 0; j < K - 2; ++j) win[j][e] = win[j + 1][e];
        win[K - 2][e] = cur[e];
      }
    }
  }
}

// Grid (channel-vector blocks, time tiles, B); block (kLanes, kBwdSteps). part (chunks, C*K + C): per
// chunk = b * gridDim.y + time tile, the block's sums over its time steps of dw (C, K) then dbias (C).
template <class T, int K, int V>
__global__ void __launch_bounds__(kLanes* kBwdSteps)
    conv1d_bwd_kernel(T* __restrict__ dx, float* __restrict__ part, const T* __restrict__ dy, const T* __restrict__ x,
                      const T* __restrict__ w, const T* __restrict__ bias, int64_t T_len, int64_t C, int64_t lddx,
                      int64_t lddy, int64_t ldx, bool silu) {
  constexpr int tile = kBwdTile<K>;
  __shared__ float red[kBwdSteps][(K + 1) * V][kLanes + 1];  // the threads' sums, dw then dbias
  const int64_t c0 = (int64_t(blockIdx.x) * kLanes + threadIdx.x) * V;
  const bool active = c0 < C;
  const int64_t t0 = (int64_t(blockIdx.y) * kBwdSteps + threadIdx.y) * tile;
  const int64_t t1 = min(T_len, t0 + tile);
  const int64_t row0 = int64_t(blockIdx.z) * T_len;  // row of (b, 0)
  x += row0 * ldx + c0;
  dy += row0 * lddy + c0;
  dx += row0 * lddx + c0;
  float dwr[K][V], dbr[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    dbr[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) dwr[j][e] = 0.0f;
  }
  if (active && t0 < T_len) {
    float wr[K][V], br[V];
    load_params<K, V>(w, bias, c0, wr, br);
    float xw[K - 1][V], gw[K - 1][V];  // x[t-(K-1) .. t-1], g[t-(K-1) .. t-1]
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
      const int64_t ts = t0 - (K - 1) + j;
      unpack_v<V, T>(ts >= 0 ? load_packed<V>(x + ts * ldx) : Packed<T, V>{}, xw[j]);
#pragma unroll
      for (int e = 0; e < V; ++e) gw[j][e] = 0.0f;
    }
    // Step t computes g[t] (zero from T on) and emits dx[t-(K-1)] once that is inside the tile.
    const int64_t t_end = t1 + K - 1, t_load = min(t_end, T_len);
    for (int64_t tb = t0; tb < t_end; tb += kBwdBatch) {
      Packed<T, V> xr[kBwdBatch], gr[kBwdBatch];
#pragma unroll
      for (int i = 0; i < kBwdBatch; ++i) {
        const bool in = tb + i < t_load;
        xr[i] = in ? load_packed<V>(x + (tb + i) * ldx) : Packed<T, V>{};
        gr[i] = in ? load_packed<V>(dy + (tb + i) * lddy) : Packed<T, V>{};
      }
#pragma unroll
      for (int i = 0; i < kBwdBatch; ++i) {
        const int64_t t = tb + i;
        if (t >= t_end) break;
        float cur[V], g[V];
        unpack_v<V, T>(xr[i], cur);
        unpack_v<V, T>(gr[i], g);
        if (silu) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            float p = br[e];
#pragma unroll
            for (int j = 0; j < K - 1; ++j) p += wr[j][e] * xw[j][e];
            p += wr[K - 1][e] * cur[e];
            const float s = fast_sigmoid(p);
            g[e] *= s * (1.0f + p * (1.0f - s));
          }
        }
        if (t < t1) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            dbr[e] += g[e];
#pragma unroll
            for (int j = 0; j < K - 1; ++j) dwr[j][e] += g[e] * xw[j][e];
            dwr[K - 1][e] += g[e] * cur[e];
          }
        }
        if (t - (K - 1) >= t0) {
          float d[V];
#pragma unroll
          for (int e = 0; e < V; ++e) {
            d[e] = wr[0][e] * g[e];
#pragma unroll
            for (int j = 0; j < K - 1; ++j) d[e] += wr[K - 1 - j][e] * gw[j][e];
          }
          store_packed<V>(dx + (t - (K - 1)) * lddx, d);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {
#pragma unroll
          for (int j = 0; j < K - 2; ++j) {
            xw[j][e] = xw[j + 1][e];
            gw[j][e] = gw[j + 1][e];
          }
          xw[K - 2][e] = cur[e];
          gw[K - 2][e] = g[e];
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int j = 0; j < K; ++j) red[threadIdx.y][j * V + e][threadIdx.x] = dwr[j][e];
    red[threadIdx.y][K * V + e][threadIdx.x] = dbr[e];
  }
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  part += (int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * C * (K + 1);
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int q = 0; q <= K; ++q) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kBwdSteps; ++i) s += red[i][q * V + e][threadIdx.x];
      if (q < K)
        part[(c0 + e) * K + q] = s;
      else
        part[C * K + c0 + e] = s;
    }
  }
}

// dw (C*K) and dbias (C) += the chunk sums (chunk_sum) of part (chunks, C*K + C); grid over its columns.
__global__ void __launch_bounds__(kChunkWarps * 32)
    conv1d_combine_kernel(float* dw, float* dbias, const float* part, int64_t chunks, int64_t CK, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * 32 + threadIdx.x % 32, M = CK + C;
  const float s = chunk_sum(part, chunks, M, i);
  if (threadIdx.x >= 32 || i >= M) return;
  if (i < CK)
    dw[i] += s;
  else
    dbias[i - CK] += s;
}

void check_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", t->desc());
}

void check_width(const char* op, int64_t K) {
  HYTRA_CHECK(K >= 2 && K <= 4, op, " on CUDA: kernel width K must be 2, 3 or 4, got ", K);
}

// Calls f(T{}, K, V) with x's storage type, the kernel width as a constant, and the vector width:
// kConvVec when C, every activation pointer and every row pitch allow such vectors, else 1.
template <class F>
void dispatch(const Tensor& x, int64_t K, std::initializer_list<const Tensor*> acts, F&& f) {
  auto with_t = [&](auto t) {
    using T = decltype(t);
    bool vec = x.size(2) % kConvVec == 0;
    for (const Tensor* a : acts)
      vec = vec && reinterpret_cast<uintptr_t>(a->raw()) % (kConvVec * sizeof(T)) == 0 &&
            a->row_pitch() % kConvVec == 0;
    auto with_v = [&](auto k) {
      if (vec)
        f(t, k, std::integral_constant<int, kConvVec>{});
      else
        f(t, k, std::integral_constant<int, 1>{});
    };
    switch (K) {
      case 2: return with_v(std::integral_constant<int, 2>{});
      case 3: return with_v(std::integral_constant<int, 3>{});
      default: return with_v(std::integral_constant<int, 4>{});
    }
  };
  if (x.dtype() == DType::BF16)
    with_t(__nv_bfloat16{});
  else
    with_t(float{});
}

}  // namespace

void conv1d_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  check_dtypes("conv1d_fwd", {&y, &x, &w, &bias});
  const int64_t B = x.size(0), T_len = x.size(1), C = x.size(2), K = w.size(1);
  check_width("conv1d_fwd", K);
  if (x.numel() == 0) return;
  dispatch(x, K, {&x, &y}, [&](auto t, auto k, auto v) {
    using T = decltype(t);
    constexpr int Kc = decltype(k)::value, V = decltype(v)::value;
    const int64_t nvec = (C + V - 1) / V, span = int64_t(kFwdSteps) * kFwdTile;
    const dim3 grid(unsigned((nvec + kLanes - 1) / kLanes), unsigned((T_len + span - 1) / span), unsigned(B));
    conv1d_fwd_kernel<T, Kc, V><<<grid, dim3(kLanes, kFwdSteps), 0, stream_of(ex)>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), static_cast<const T*>(w.raw()),
        static_cast<const T*>(bias.raw()), T_len, C, y.row_pitch(), x.row_pitch(), silu);
  });
  check_launch("conv1d_fwd_kernel");
}

void conv1d_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                const Tensor& bias, bool silu) {
  check_dtypes("conv1d_bwd", {&dx, &dw, &dbias, &dy, &x, &w, &bias});
  const int64_t B = x.size(0), T_len = x.size(1), C = x.size(2), K = w.size(1);
  check_width("conv1d_bwd", K);
  if (x.numel() == 0) return;
  cudaStream_t s = stream_of(ex);
  dispatch(x, K, {&x, &dy, &dx}, [&](auto t, auto k, auto v) {
    using T = decltype(t);
    constexpr int Kc = decltype(k)::value, V = decltype(v)::value;
    const int64_t nvec = (C + V - 1) / V, span = int64_t(kBwdSteps) * kBwdTile<Kc>;
    const int64_t tiles = (T_len + span - 1) / span, chunks = B * tiles, M = C * (Kc + 1);
    Tensor part = Tensor::empty({chunks, M}, DType::F32, Device::CUDA);  // (chunks, C*K + C)
    const dim3 grid(unsigned((nvec + kLanes - 1) / kLanes), unsigned(tiles), unsigned(B));
    conv1d_bwd_kernel<T, Kc, V><<<grid, dim3(kLanes, kBwdSteps), 0, s>>>(
        static_cast<T*>(dx.raw()), part.data<float>(), static_cast<const T*>(dy.raw()),
        static_cast<const T*>(x.raw()), static_cast<const T*>(w.raw()), static_cast<const T*>(bias.raw()), T_len, C,
        dx.row_pitch(), dy.row_pitch(), x.row_pitch(), silu);
    check_launch("conv1d_bwd_kernel");
    conv1d_combine_kernel<<<unsigned((M + 31) / 32), kChunkWarps * 32, 0, s>>>(
        dw.data<float>(), dbias.data<float>(), part.data<float>(), chunks, C * Kc, C);
    check_launch("conv1d_combine_kernel");
  });
}

}  // namespace hytra::cuda
