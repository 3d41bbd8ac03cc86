// Gated RMSNorm over groups of group_size channels, forward and backward (ops.h "norms"; docs/spec/mamba_gdn.md
// §1 step 5, §2 step 6), statistics in fp32. Per row and group, sz = silu(z):
//   norm_before_gate = false: u = x*sz, r = 1/sqrt(mean(u^2) + eps), y = u*r*w
//     du = r*(gu - u*r^2*mean(gu*u)), gu = dy*w;  dx = du*sz, dz = du*x*sz'
//   norm_before_gate = true:  r = 1/sqrt(mean(x^2) + eps), y = x*r*w*sz
//     dx = r*(g - x*r^2*mean(g*x)), g = dy*w*sz;  dz = dy*x*r*w*sz'
//   both: dw += sum_n dy*x*r*sz, also summed over the groups when w is (group_size)
// A (row, group) pair is a contiguous run of group_size elements (unit n*G + g, which is also its
// rstd index): one warp per unit, kWarps units per block, V elements per lane step (a 16-byte
// vector when group_size and the pointers allow, else 1); the warp reads its unit twice (the
// second pass from cache). The weight gradient is deterministic without atomics: a column pass
// sums fixed row chunks into fp32 partials (chunks, C), then the chunks are added in chunk order,
// and for a (group_size) weight the groups in group order.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kWarps = 8;            // units per block
constexpr int kColThreads = 256;     // weight-gradient pass: columns per block
constexpr int64_t kMaxChunks = 128;  // weight-gradient pass: row chunks
constexpr int kCombineThreads = 256;

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
      const float v = norm_before_gate ? xv[e] : xv[e] * (zv[e] * sigmoid(zv[e]));
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
      const float sz = zv[e] * sigmoid(zv[e]);
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
    for (int e = 0; e < V; ++e) dot += dyv[e] * wv[e] * (zv[e] * sigmoid(zv[e])) * xv[e];
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
      const float s = sigmoid(zv[e]), sz = zv[e] * s, dsz = s * (1.0f + zv[e] * (1.0f - s));
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
    s += float(dy[n * C + c]) * float(x[n * C + c]) * rstd[n * G + g] * (zv * sigmoid(zv));
  }
  part[int64_t(blockIdx.y) * C + c] = s;
}

// out[c] (+)= sum over chunks, in chunk order, of part[chunk, c].
__global__ void gated_rmsnorm_chunks_kernel(float* out, bool accumulate, const float* part, int64_t chunks, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += part[k * C + c];
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

// Calls f(T{}) with the storage type of dtype d.
template <class F>
void with_type(DType d, F&& f) {
  if (d == DType::BF16)
    f(__nv_bfloat16{});
  else
    f(float{});
}

// Calls f(T{}, V) with x's storage type and the vector width: kVec<T> when group_size, every pointer
// and every row pitch allow 16-byte vectors, else 1.
template <class F>
void dispatch(const Tensor& x, int64_t gs, std::initializer_list<const Tensor*> ts, F&& f) {
  with_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    bool vec = gs % kVec<T> == 0;
    for (const Tensor* a : ts) vec = vec && aligned16(a->raw()) && a->row_pitch() % kVec<T> == 0;
    if (vec)
      f(t, std::integral_constant<int, kVec<T>>{});
    else
      f(t, std::integral_constant<int, 1>{});
  });
}

}  // namespace

void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w,
                       int64_t group_size, double eps, bool norm_before_gate) {
  check_dtypes("gated_rmsnorm_fwd", {&y, &x, &z, &w});
  const int64_t N = x.size(0), C = x.size(1), G = C / group_size, units = N * G;
  if (units == 0) return;
  dispatch(x, group_size, {&y, &x, &z, &w}, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    gated_rmsnorm_fwd_kernel<T, V><<<blocks_for(units, kWarps), kWarps * 32, 0, stream_of(ex)>>>(
        static_cast<T*>(y.raw()), rstd.data<float>(), static_cast<const T*>(x.raw()), static_cast<const T*>(z.raw()),
        static_cast<const T*>(w.raw()), units, group_size, G, z.row_pitch(), w.numel() == C, float(eps),
        norm_before_gate);
  });
  check_launch("gated_rmsnorm_fwd_kernel");
}

void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z,
                       const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate) {
  check_dtypes("gated_rmsnorm_bwd", {&dx, &dz, &dw, &dy, &x, &z, &w});
  const int64_t N = x.size(0), C = x.size(1), G = C / group_size, units = N * G, M = w.numel();
  if (units == 0) return;
  cudaStream_t s = stream_of(ex);
  dispatch(x, group_size, {&dx, &dz, &dy, &x, &z, &w}, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    gated_rmsnorm_bwd_kernel<T, V><<<blocks_for(units, kWarps), kWarps * 32, 0, s>>>(
        static_cast<T*>(dx.raw()), static_cast<T*>(dz.raw()), static_cast<const T*>(dy.raw()),
        static_cast<const T*>(x.raw()), static_cast<const T*>(z.raw()), static_cast<const T*>(w.raw()),
        rstd.data<float>(), units, group_size, G, dz.row_pitch(), z.row_pitch(), M == C, norm_before_gate);
  });
  check_launch("gated_rmsnorm_bwd_kernel");

  const int64_t rows_per_chunk = (N + kMaxChunks - 1) / kMaxChunks, chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  Tensor part = Tensor::empty({chunks, C}, DType::F32, Device::CUDA);  // (chunks, C)
  with_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    gated_rmsnorm_wgrad_kernel<T><<<dim3(blocks_for(C, kColThreads), unsigned(chunks)), kColThreads, 0, s>>>(
        part.data<float>(), static_cast<const T*>(dy.raw()), static_cast<const T*>(x.raw()),
        static_cast<const T*>(z.raw()), rstd.data<float>(), N, C, group_size, z.row_pitch(), rows_per_chunk);
  });
  check_launch("gated_rmsnorm_wgrad_kernel");
  if (M == C) {
    gated_rmsnorm_chunks_kernel<<<blocks_for(C, kCombineThreads), kCombineThreads, 0, s>>>(
        dw.data<float>(), true, part.data<float>(), chunks, C);
    check_launch("gated_rmsnorm_chunks_kernel");
    return;
  }
  Tensor tot = Tensor::empty({C}, DType::F32, Device::CUDA);  // (C)
  gated_rmsnorm_chunks_kernel<<<blocks_for(C, kCombineThreads), kCombineThreads, 0, s>>>(tot.data<float>(), false,
                                                                                         part.data<float>(), chunks, C);
  check_launch("gated_rmsnorm_chunks_kernel");
  gated_rmsnorm_groups_kernel<<<blocks_for(M, kCombineThreads), kCombineThreads, 0, s>>>(dw.data<float>(),
                                                                                         tot.data<float>(), G, M);
  check_launch("gated_rmsnorm_groups_kernel");
}

}  // namespace hytra::cuda
