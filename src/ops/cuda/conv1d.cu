// Causal depthwise conv1d over time, forward and backward (ops.h "causal depthwise conv1d"; docs/spec/mamba_gdn.md
// §1 step 2, §2 step 2), math in fp32:
//   p[b,t,c] = bias[c] + sum_{j<K} w[c,j] * x[b, t-(K-1)+j, c];   y = silu(p) or p
//   g = dy * silu'(p) (or dy);   dx[b,s,c] = sum_{j<K} w[c,j] * g[b, s+(K-1)-j, c]
//   dw[c,j] += sum_{b,t} g[b,t,c] * x[b, t-(K-1)+j, c];   dbias[c] += sum_{b,t} g[b,t,c]
// Thread layout (both kernels): a block is kLanes threads along channels (each owning V adjacent
// channels: one 16-byte vector when C and the pointers allow, else V = 1) times k*Steps threads
// along time, each walking k*Tile consecutive time steps with the last K-1 inputs (and, backward,
// the last K-1 values of g) in registers, so every x and dy is read from memory about once.
// The backward walks K-1 steps past its tile to finish dx at the tile's end (g recomputed from x
// and dy: no saved pre-activation). Its weight gradients are deterministic without atomics: each
// block adds its threads' sums over time in thread order into one fp32 partial per (batch, time
// tile) chunk, and a second kernel adds the chunks in chunk order. K is a template parameter
// (2..4, causal-conv1d's range) so the windows stay in registers; other widths are a named error
// here (the CPU reference takes any K). Activations are row-pitched: row (b, t) of x starts at
// (b T + t) ldx, so x can be a column range of a wider tensor (the Mamba in_proj output), read in place.
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kLanes = 32;    // threads along channels (a warp reads consecutive vectors)
constexpr int kFwdSteps = 8;  // forward: threads along time
constexpr int kFwdTile = 16;  // forward: time steps per thread
constexpr int kBwdSteps = 4;  // backward: threads along time (fewer: more registers each)
constexpr int kBwdTile = 64;  // backward: time steps per thread
constexpr int kCombineThreads = 256;

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
    conv1d_fwd_kernel(T* y, const T* x, const T* w, const T* bias, int64_t T_len, int64_t C, int64_t ldy, int64_t ldx,
                      bool silu) {
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
    if (ts >= 0 && ts < T_len) {
      load_v<V>(x + ts * ldx, win[j]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) win[j][e] = 0.0f;
    }
  }
#pragma unroll 4
  for (int64_t t = t0; t < t1; ++t) {
    float cur[V], out[V];
    load_v<V>(x + t * ldx, cur);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float p = br[e];
#pragma unroll
      for (int j = 0; j < K - 1; ++j) p += wr[j][e] * win[j][e];
      p += wr[K - 1][e] * cur[e];
      out[e] = silu ? p * sigmoid(p) : p;
    }
    store_v<V>(y + t * ldy, out);
#pragma unroll
    for (int e = 0; e < V; ++e) {
#pragma unroll
      for (int j = 0; j < K - 2; ++j) win[j][e] = win[j + 1][e];
      win[K - 2][e] = cur[e];
    }
  }
}

// Grid (channel-vector blocks, time tiles, B); block (kLanes, kBwdSteps). pdw (chunks, C, K) and
// pdb (chunks, C): the block's sums over its time steps, chunk = b * gridDim.y + time tile.
template <class T, int K, int V>
__global__ void __launch_bounds__(kLanes* kBwdSteps)
    conv1d_bwd_kernel(T* dx, float* pdw, float* pdb, const T* dy, const T* x, const T* w, const T* bias, int64_t T_len,
                      int64_t C, int64_t lddx, int64_t lddy, int64_t ldx, bool silu) {
  __shared__ float red[kBwdSteps][(K + 1) * V][kLanes + 1];  // the threads' sums, dw then dbias
  const int64_t c0 = (int64_t(blockIdx.x) * kLanes + threadIdx.x) * V;
  const bool active = c0 < C;
  const int64_t t0 = (int64_t(blockIdx.y) * kBwdSteps + threadIdx.y) * kBwdTile;
  const int64_t t1 = min(T_len, t0 + kBwdTile);
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
      if (ts >= 0) {
        load_v<V>(x + ts * ldx, xw[j]);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) xw[j][e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < V; ++e) gw[j][e] = 0.0f;
    }
    // Step t computes g[t] (zero from T on) and emits dx[t-(K-1)] once that is inside the tile.
    const int64_t t_end = t1 + K - 1;
#pragma unroll 2
    for (int64_t t = t0; t < t_end; ++t) {
      float cur[V], g[V];
      const bool in_seq = t < T_len;
      if (in_seq) {
        load_v<V>(x + t * ldx, cur);
        load_v<V>(dy + t * lddy, g);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) cur[e] = g[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (silu) {
          float p = br[e];
#pragma unroll
          for (int j = 0; j < K - 1; ++j) p += wr[j][e] * xw[j][e];
          p += wr[K - 1][e] * cur[e];
          const float s = sigmoid(p);
          g[e] *= s * (1.0f + p * (1.0f - s));
        }
        if (t < t1) {
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
          for (int i = 0; i < K - 1; ++i) d[e] += wr[K - 1 - i][e] * gw[i][e];
        }
        store_v<V>(dx + (t - (K - 1)) * lddx, d);
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
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int j = 0; j < K; ++j) red[threadIdx.y][j * V + e][threadIdx.x] = dwr[j][e];
    red[threadIdx.y][K * V + e][threadIdx.x] = dbr[e];
  }
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  const int64_t chunk = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int q = 0; q <= K; ++q) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kBwdSteps; ++i) s += red[i][q * V + e][threadIdx.x];
      if (q < K)
        pdw[(chunk * C + c0 + e) * K + q] = s;
      else
        pdb[chunk * C + c0 + e] = s;
    }
  }
}

// grad (M) += sum over chunks, in chunk order, of part (chunks, M).
__global__ void conv1d_combine_kernel(float* grad, const float* part, int64_t chunks, int64_t M) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += part[k * M + i];
  grad[i] += s;
}

void check_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", t->desc());
}

void check_width(const char* op, int64_t K) {
  HYTRA_CHECK(K >= 2 && K <= 4, op, " on CUDA: kernel width K must be 2, 3 or 4, got ", K);
}

// Calls f(T{}, K, V) with x's storage type, the kernel width as a constant, and the vector width:
// kVec<T> when C, every activation pointer and every row pitch allow 16-byte vectors, else 1.
template <class F>
void dispatch(const Tensor& x, int64_t K, std::initializer_list<const Tensor*> acts, F&& f) {
  auto with_t = [&](auto t) {
    using T = decltype(t);
    bool vec = x.size(2) % kVec<T> == 0;
    for (const Tensor* a : acts) vec = vec && aligned16(a->raw()) && a->row_pitch() % kVec<T> == 0;
    auto with_v = [&](auto k) {
      if (vec)
        f(t, k, std::integral_constant<int, kVec<T>>{});
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
  const int64_t span = int64_t(kBwdSteps) * kBwdTile, tiles = (T_len + span - 1) / span, chunks = B * tiles;
  Tensor pdw = Tensor::empty({chunks, C, K}, DType::F32, Device::CUDA);  // (chunks, C, K)
  Tensor pdb = Tensor::empty({chunks, C}, DType::F32, Device::CUDA);     // (chunks, C)
  cudaStream_t s = stream_of(ex);
  dispatch(x, K, {&x, &dy, &dx}, [&](auto t, auto k, auto v) {
    using T = decltype(t);
    constexpr int Kc = decltype(k)::value, V = decltype(v)::value;
    const int64_t nvec = (C + V - 1) / V;
    const dim3 grid(unsigned((nvec + kLanes - 1) / kLanes), unsigned(tiles), unsigned(B));
    conv1d_bwd_kernel<T, Kc, V><<<grid, dim3(kLanes, kBwdSteps), 0, s>>>(
        static_cast<T*>(dx.raw()), pdw.data<float>(), pdb.data<float>(), static_cast<const T*>(dy.raw()),
        static_cast<const T*>(x.raw()), static_cast<const T*>(w.raw()), static_cast<const T*>(bias.raw()), T_len, C,
        dx.row_pitch(), dy.row_pitch(), x.row_pitch(), silu);
  });
  check_launch("conv1d_bwd_kernel");
  for (auto [grad, part] : {std::pair<Tensor*, Tensor*>{&dw, &pdw}, {&dbias, &pdb}}) {
    const int64_t M = grad->numel();
    conv1d_combine_kernel<<<unsigned((M + kCombineThreads - 1) / kCombineThreads), kCombineThreads, 0, s>>>(
        grad->data<float>(), part->data<float>(), chunks, M);
    check_launch("conv1d_combine_kernel");
  }
}

}  // namespace hytra::cuda
