// Gated RMSNorm over groups of group_size channels, forward and backward (ops.h "norms"; docs/spec/mamba_gdn.md
// §1 step 5, §2 step 6), statistics in fp32. Per row and group, sz = silu(z):
//   norm_before_gate = false: u = x*sz, r = 1/sqrt(mean(u^2) + eps), y = u*r*w
//     du = r*(gu - u*r^2*mean(gu*u)), gu = dy*w;  dx = du*sz, dz = du*x*sz'
//   norm_before_gate = true:  r = 1/sqrt(mean(x^2) + eps), y = x*r*w*sz
//     dx = r*(g - x*r^2*mean(g*x)), g = dy*w*sz;  dz = dy*x*r*w*sz'
//   both: dw += sum_n dy*x*r*sz, also summed over the groups when w is (group_size)
// A (row, group) pair is a contiguous run of group_size elements (unit n*G + g, which is also its
// rstd index), handled by one warp with V elements per lane step (a 16-byte vector when group_size
// and the pointers allow, else 1). Register path (a unit of at most kMaxNV vectors per lane): the
// lane holds its NV vectors (lane + 32 i) of the unit, so every element is read once; the backward
// block walks a fixed chunk of rows of one group (warp j: rows j, j + kBwdWarps, ...; the next row's
// loads issued before this row's math) and sums the weight gradient in registers, then adds its
// warps' sums in warp order into fp32 partials (chunks, C). Wider units take the loop kernels:
// the warp reads its unit twice (the second pass from cache) and a column pass sums fixed row
// chunks into the same partials. Either way the chunks are added in a fixed order (chunk_sum), and
// for a (group_size) weight the groups in group order: deterministic without atomics. silu's
// sigmoid is fast_sigmoid (common.cuh) throughout.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kWarps = 8;                          // units per block
constexpr int kMaxNV = 4;                          // register path: at most this many vectors per lane
constexpr int kBwdWarps = 4;                       // register-path backward: warps per block
constexpr int64_t kRowsPerChunk = kBwdWarps * 16;  // register-path backward: rows per block
constexpr int kColThreads = 256;                   // weight-gradient pass: columns per block
constexpr int64_t kMaxChunks = 128;                // weight-gradient pass: row chunks
constexpr int kCombineThreads = 256;

// The lane's NV vectors (lane + 32 i) V of the gs elements at p (zeros past gs).
template <int V, int NV, class T>
__device__ __forceinline__ void load_unit(const T* p, int lane, int64_t gs, Packed<T, V> (&out)[NV]) {
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = int64_t(lane + 32 * i) * V;
    out[i] = k < gs ? load_packed<V>(p + k) : Packed<T, V>{};
  }
}

// Register-path forward; layout as gated_rmsnorm_fwd_kernel.
template <class T, int V, int NV>
__global__ void __launch_bounds__(kWarps * 32)
    gated_rmsnorm_fwd_reg_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                                 const T* __restrict__ z, const T* __restrict__ w, int64_t units, int64_t gs, int64_t G,
                                 int64_t ldz, bool w_full, float eps, bool norm_before_gate) {
  const int64_t unit = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = unit * gs;
  Packed<T, V> xp[NV], zp[NV], wp[NV];
  load_unit<V>(x + base, lane, gs, xp);
  load_unit<V>(z + (unit / G) * ldz + (unit % G) * gs, lane, gs, zp);
  load_unit<V>(w + (w_full ? (unit % G) * gs : 0), lane, gs, wp);
  float xv[NV][V], sz[NV][V];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    unpack_v<V, T>(xp[i], xv[i]);
    unpack_v<V, T>(zp[i], sz[i]);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      sz[i][e] *= fast_sigmoid(sz[i][e]);
      const float v = norm_before_gate ? xv[i][e] : xv[i][e] * sz[i][e];
      ss += v * v;  // zero past gs
    }
  }
  const float r = 1.0f / sqrtf(warp_sum(ss) / float(gs) + eps);
  if (lane == 0) rstd[unit] = r;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = int64_t(lane + 32 * i) * V;
    if (k >= gs) break;
    float wv[V], out[V];
    unpack_v<V, T>(wp[i], wv);
#pragma unroll
    for (int e = 0; e < V; ++e)
      out[e] = norm_before_gate ? xv[i][e] * r * wv[e] * sz[i][e] : (xv[i][e] * sz[i][e]) * r * wv[e];
    store_packed<V>(y + base + k, out);
  }
}

// Register-path backward: block chunk * G + g (kBwdWarps warps) walks rows [chunk * kRowsPerChunk,
// ...) of group g (layout as gated_rmsnorm_bwd_kernel) and writes its weight-gradient sums to part[chunk, g*gs ..].
template <class T, int V, int NV>
__global__ void __launch_bounds__(kBwdWarps * 32)
    gated_rmsnorm_bwd_reg_kernel(T* __restrict__ dx, T* __restrict__ dz, float* __restrict__ part,
                                 const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ z,
                                 const T* __restrict__ w, const float* __restrict__ rstd, int64_t N, int64_t gs,
                                 int64_t G, int64_t lddz, int64_t ldz, bool w_full, bool norm_before_gate) {
  __shared__ float red[kBwdWarps][NV * V][32];  // the warps' weight-gradient sums
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunk = blockIdx.x / G, g = blockIdx.x % G, C = G * gs, col = g * gs;
  const int64_t n1 = min(N, (chunk + 1) * kRowsPerChunk);
  float wv[NV][V], acc[NV][V];
  {
    Packed<T, V> wp[NV];
    load_unit<V>(w + (w_full ? col : 0), lane, gs, wp);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      unpack_v<V, T>(wp[i], wv[i]);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[i][e] = 0.0f;
    }
  }
  int64_t n = chunk * kRowsPerChunk + warp;
  Packed<T, V> xp[NV], zp[NV], dyp[NV];  // row n, then the next row
  float r_next = 0.0f;
  if (n < n1) {
    load_unit<V>(x + n * C + col, lane, gs, xp);
    load_unit<V>(z + n * ldz + col, lane, gs, zp);
    load_unit<V>(dy + n * C + col, lane, gs, dyp);
    r_next = rstd[n * G + g];
  }
  for (; n < n1; n += kBwdWarps) {
    Packed<T, V> xc[NV], zc[NV], dyc[NV];  // this row (unpacked where used: fewer registers)
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      xc[i] = xp[i];
      zc[i] = zp[i];
      dyc[i] = dyp[i];
    }
    const float r = r_next;
    const int64_t nn = n + kBwdWarps;
    if (nn < n1) {
      load_unit<V>(x + nn * C + col, lane, gs, xp);
      load_unit<V>(z + nn * ldz + col, lane, gs, zp);
      load_unit<V>(dy + nn * C + col, lane, gs, dyp);
      r_next = rstd[nn * G + g];
    }
    float dot = 0.0f;  // sum(dy*w*sz*x): sum(gu*u) after the gate, sum(g*x) before it (zero past gs)
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float xv[V], zv[V], dyv[V];
      unpack_v<V, T>(xc[i], xv);
      unpack_v<V, T>(zc[i], zv);
      unpack_v<V, T>(dyc[i], dyv);
#pragma unroll
      for (int e = 0; e < V; ++e) dot += dyv[e] * wv[i][e] * (zv[e] * fast_sigmoid(zv[e])) * xv[e];
    }
    const float coef = r * r * warp_sum(dot) / float(gs);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t k = int64_t(lane + 32 * i) * V;
      if (k >= gs) break;
      float xv[V], zv[V], dyv[V], dxv[V], dzv[V];
      unpack_v<V, T>(xc[i], xv);
      unpack_v<V, T>(zc[i], zv);
      unpack_v<V, T>(dyc[i], dyv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float s = fast_sigmoid(zv[e]), sz = zv[e] * s, dsz = s * (1.0f + zv[e] * (1.0f - s));
        if (norm_before_gate) {
          dxv[e] = r * (dyv[e] * wv[i][e] * sz - xv[e] * coef);
          dzv[e] = dyv[e] * xv[e] * r * wv[i][e] * dsz;
        } else {
          const float du = r * (dyv[e] * wv[i][e] - xv[e] * sz * coef);
          dxv[e] = du * sz;
          dzv[e] = du * xv[e] * dsz;
        }
        acc[i][e] += dyv[e] * xv[e] * r * sz;
      }
      store_packed<V>(dx + n * C + col + k, dxv);
      store_packed<V>(dz + n * lddz + col + k, dzv);
    }
  }
#pragma unroll
  for (int i = 0; i < NV; ++i)
#pragma unroll
    for (int e = 0; e < V; ++e) red[warp][i * V + e][lane] = acc[i][e];
  __syncthreads();
  if (warp != 0) return;
  float* out = part + chunk * C + col;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = int64_t(lane + 32 * i) * V;
    if (k >= gs) break;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float sum = 0.0f;
      for (int j = 0; j < kBwdWarps; ++j) sum += red[j][i * V + e][lane];
      out[k + e] = sum;
    }
  }
}

// x, y (units, gs) viewed as units of one group; z row-pitched (row n at n * ldz, group g at g * gs in
// it); w (G*gs) when w_full, else (gs); rstd (units).
template <class T, int V>
__global__ void __launch_bounds__(kWarps * 32)
    gated_rmsnorm_fwd_kernel(T* y, float* rstd, const T* x, const T* z, const T* w, int64_t units, int64_t gs,
                             int64_t G, int64_t ldz, bool w_full, float eps, bool norm_before_gate) {
  const int64_t unit = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = unit * gs;
  z += (unit / G) * ldz + (unit % G) * gs;
  const T* wg = w + (w_full ? (unit % G) * gs : 0);
  float ss = 0.0f;
  for (int64_t k = int64_t(lane) * V; k < gs; k += 32 * V) {
    float xv[V], zv[V];
    load_v<V>(x + base + k, xv);
    load_v<V>(z + k, zv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float v = norm_before_gate ? xv[e] : xv[e] * (zv[e] * fast_sigmoid(zv[e]));
      ss += v * v;
    }
  }
  const float r = 1.0f / sqrtf(warp_sum(ss) / float(gs) + eps);
  if (lane == 0) rstd[unit] = r;
  for (int64_t k = int64_t(lane) * V; k < gs; k += 32 * V) {
    float xv[V], zv[V], wv[V], out[V];
    load_v<V>(x + base + k, xv);
    load_v<V>(z + k, zv);
    load_v<V>(wg + k, wv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float sz = zv[e] * fast_sigmoid(zv[e]);
      out[e] = norm_before_gate ? xv[e] * r * wv[e] * sz : (xv[e] * sz) * r * wv[e];
    }
    store_v<V>(y + base + k, out);
  }
}

// dx, dz of each unit (layout as the forward).
template <class T, int V>
__global__ void __launch_bounds__(kWarps * 32)
    gated_rmsnorm_bwd_kernel(T* dx, T* dz, const T* dy, const T* x, const T* z, const T* w, const float* rstd,
                             int64_t units, int64_t gs, int64_t G, int64_t lddz, int64_t ldz, bool w_full,
                             bool norm_before_gate) {
  const int64_t unit = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = unit * gs;
  z += (unit / G) * ldz + (unit % G) * gs;
  dz += (unit / G) * lddz + (unit % G) * gs;
  const T* wg = w + (w_full ? (unit % G) * gs : 0);
  const float r = rstd[unit];
  float dot = 0.0f;  // sum(dy*w*sz*x): sum(gu*u) after the gate, sum(g*x) before it
  for (int64_t k = int64_t(lane) * V; k < gs; k += 32 * V) {
    float xv[V], zv[V], dyv[V], wv[V];
    load_v<V>(x + base + k, xv);
    load_v<V>(z + k, zv);
    load_v<V>(dy + base + k, dyv);
    load_v<V>(wg + k, wv);
#pragma unroll
    for (int e = 0; e < V; ++e) dot += dyv[e] * wv[e] * (zv[e] * fast_sigmoid(zv[e])) * xv[e];
  }
  const float coef = r * r * warp_sum(dot) / float(gs);
  for (int64_t k = int64_t(lane) * V; k < gs; k += 32 * V) {
    float xv[V], zv[V], dyv[V], wv[V], dxv[V], dzv[V];
    load_v<V>(x + base + k, xv);
    load_v<V>(z + k, zv);
    load_v<V>(dy + base + k, dyv);
    load_v<V>(wg + k, wv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float s = fast_sigmoid(zv[e]), sz = zv[e] * s, dsz = s * (1.0f + zv[e] * (1.0f - s));
      if (norm_before_gate) {
        dxv[e] = r * (dyv[e] * wv[e] * sz - xv[e] * coef);
        dzv[e] = dyv[e] * xv[e] * r * wv[e] * dsz;
      } else {
        const float du = r * (dyv[e] * wv[e] - xv[e] * sz * coef);
        dxv[e] = du * sz;
        dzv[e] = du * xv[e] * dsz;
      }
    }
    store_v<V>(dx + base + k, dxv);
    store_v<V>(dz + k, dzv);
  }
}

// Block (column tile, row chunk): part[chunk, c] = sum over the chunk's rows of dy*x*r*silu(z).
template <class T>
__global__ void gated_rmsnorm_wgrad_kernel(float* part, const T* dy, const T* x, const T* z, const float* rstd,
                                           int64_t N, int64_t C, int64_t gs, int64_t ldz, int64_t rows_per_chunk) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t G = C / gs, g = c / gs;
  const int64_t n0 = int64_t(blockIdx.y) * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
  float s = 0.0f;
  for (int64_t n = n0; n < n1; ++n) {
    const float zv = float(z[n * ldz + c]);
    s += float(dy[n * C + c]) * float(x[n * C + c]) * rstd[n * G + g] * (zv * fast_sigmoid(zv));
  }
  part[int64_t(blockIdx.y) * C + c] = s;
}

// out[c] (+)= the chunk sum (chunk_sum) of part[., c]; grid over the columns, 32 per block.
__global__ void __launch_bounds__(kChunkWarps * 32)
    gated_rmsnorm_chunks_kernel(float* out, bool accumulate, const float* part, int64_t chunks, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const float s = chunk_sum(part, chunks, C, c);
  if (threadIdx.x >= 32 || c >= C) return;
  out[c] = accumulate ? out[c] + s : s;
}

// grad[k] += sum over groups, in group order, of tot[g * M + k].
__global__ void gated_rmsnorm_groups_kernel(float* grad, const float* tot, int64_t groups, int64_t M) {
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= M) return;
  float s = 0.0f;
  for (int64_t g = 0; g < groups; ++g) s += tot[g * M + k];
  grad[k] += s;
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

void check_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", t->desc());
}

// Calls f(T{}, V) with x's storage type and the vector width: kVec<T> when group_size, every pointer
// and every row pitch allow 16-byte vectors, else 1.
template <class F>
void dispatch(const Tensor& x, int64_t gs, std::initializer_list<const Tensor*> ts, F&& f) {
  auto vec = [&](int64_t v) {
    bool ok = gs % v == 0;
    for (const Tensor* a : ts) ok = ok && aligned16(a->raw()) && a->row_pitch() % v == 0;
    return ok;
  };
  with_type_and_width(x.dtype(), vec, f);
}

// Vectors per lane (1, 2 or kMaxNV) holding a unit of gs elements in V-element vectors; 0 when the
// unit is too wide for the register path.
int lane_vectors(int64_t gs, int V) {
  const int64_t n = (gs + 32 * V - 1) / (32 * V);
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= kMaxNV ? kMaxNV : 0;
}

// Calls f(NV) with nv (1, 2 or kMaxNV) as a constant.
template <class F>
void with_nv(int nv, F&& f) {
  if (nv == 1)
    f(std::integral_constant<int, 1>{});
  else if (nv == 2)
    f(std::integral_constant<int, 2>{});
  else
    f(std::integral_constant<int, kMaxNV>{});
}

}  // namespace

void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w,
                       int64_t group_size, double eps, bool norm_before_gate) {
  check_dtypes("gated_rmsnorm_fwd", {&y, &x, &z, &w});
  const int64_t N = x.size(0), C = x.size(1), G = C / group_size, units = N * G;
  if (units == 0) return;
  cudaStream_t s = stream_of(ex);
  dispatch(x, group_size, {&y, &x, &z, &w}, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    auto launch = [&](auto kernel) {  // the loop and register kernels take the same arguments
      kernel<<<blocks_for(units, kWarps), kWarps * 32, 0, s>>>(
          static_cast<T*>(y.raw()), rstd.data<float>(), static_cast<const T*>(x.raw()), static_cast<const T*>(z.raw()),
          static_cast<const T*>(w.raw()), units, group_size, G, z.row_pitch(), w.numel() == C, float(eps),
          norm_before_gate);
    };
    const int nv = lane_vectors(group_size, V);
    if (nv == 0)
      launch(gated_rmsnorm_fwd_kernel<T, V>);
    else
      with_nv(nv, [&](auto c) { launch(gated_rmsnorm_fwd_reg_kernel<T, V, decltype(c)::value>); });
  });
  check_launch("gated_rmsnorm_fwd_kernel");
}

void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z,
                       const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate) {
  check_dtypes("gated_rmsnorm_bwd", {&dx, &dz, &dw, &dy, &x, &z, &w});
  const int64_t N = x.size(0), C = x.size(1), G = C / group_size, units = N * G, M = w.numel();
  if (units == 0) return;
  cudaStream_t s = stream_of(ex);
  Tensor part;  // (chunks, C)
  int64_t chunks = 0;
  dispatch(x, group_size, {&dx, &dz, &dy, &x, &z, &w}, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    const int nv = lane_vectors(group_size, V);
    if (nv != 0) {
      chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
      part = Tensor::empty({chunks, C}, DType::F32, Device::CUDA);
      with_nv(nv, [&](auto c) {
        gated_rmsnorm_bwd_reg_kernel<T, V, decltype(c)::value><<<unsigned(chunks * G), kBwdWarps * 32, 0, s>>>(
            static_cast<T*>(dx.raw()), static_cast<T*>(dz.raw()), part.data<float>(), static_cast<const T*>(dy.raw()),
            static_cast<const T*>(x.raw()), static_cast<const T*>(z.raw()), static_cast<const T*>(w.raw()),
            rstd.data<float>(), N, group_size, G, dz.row_pitch(), z.row_pitch(), M == C, norm_before_gate);
      });
      check_launch("gated_rmsnorm_bwd_reg_kernel");
      return;
    }
    gated_rmsnorm_bwd_kernel<T, V><<<blocks_for(units, kWarps), kWarps * 32, 0, s>>>(
        static_cast<T*>(dx.raw()), static_cast<T*>(dz.raw()), static_cast<const T*>(dy.raw()),
        static_cast<const T*>(x.raw()), static_cast<const T*>(z.raw()), static_cast<const T*>(w.raw()),
        rstd.data<float>(), units, group_size, G, dz.row_pitch(), z.row_pitch(), M == C, norm_before_gate);
    check_launch("gated_rmsnorm_bwd_kernel");
    const int64_t rows_per_chunk = (N + kMaxChunks - 1) / kMaxChunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    part = Tensor::empty({chunks, C}, DType::F32, Device::CUDA);
    gated_rmsnorm_wgrad_kernel<T><<<dim3(blocks_for(C, kColThreads), unsigned(chunks)), kColThreads, 0, s>>>(
        part.data<float>(), static_cast<const T*>(dy.raw()), static_cast<const T*>(x.raw()),
        static_cast<const T*>(z.raw()), rstd.data<float>(), N, C, group_size, z.row_pitch(), rows_per_chunk);
    check_launch("gated_rmsnorm_wgrad_kernel");
  });
  const unsigned col_blocks = blocks_for(C, 32);
  if (M == C) {
    gated_rmsnorm_chunks_kernel<<<col_blocks, kChunkWarps * 32, 0, s>>>(dw.data<float>(), true, part.data<float>(),
                                                                        chunks, C);
    check_launch("gated_rmsnorm_chunks_kernel");
    return;
  }
  Tensor tot = Tensor::empty({C}, DType::F32, Device::CUDA);  // (C)
  gated_rmsnorm_chunks_kernel<<<col_blocks, kChunkWarps * 32, 0, s>>>(tot.data<float>(), false, part.data<float>(),
                                                                      chunks, C);
  check_launch("gated_rmsnorm_chunks_kernel");
  gated_rmsnorm_groups_kernel<<<blocks_for(M, kCombineThreads), kCombineThreads, 0, s>>>(dw.data<float>(),
                                                                                         tot.data<float>(), G, M);
  check_launch("gated_rmsnorm_groups_kernel");
}

}  // namespace hytra::cuda
