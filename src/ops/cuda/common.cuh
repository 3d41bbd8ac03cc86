// Shared pieces of the CUDA kernels: the executor's stream, launch checks, grid sizing,
// fp32/bf16 loads and stores chosen at run time (math is always fp32), and warp/block reductions
// whose summation order is fixed by the block size alone (deterministic results).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda_check_cuda.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra::cuda {

inline cudaStream_t stream_of(const Exec& ex) { return static_cast<cudaStream_t>(ex.stream()); }

// Call right after a launch: a bad configuration or a fault seen so far throws, naming the kernel.
inline void check_launch(const char* kernel) { cuda_check(cudaGetLastError(), kernel); }

// Blocks for a grid-stride loop over n items (capped; the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65536) blocks = 65536;
  return unsigned(blocks);
}

// Element i of a fp32 or bf16 buffer, as fp32.
__device__ __forceinline__ float load_f(const void* p, DType t, int64_t i) {
  if (t == DType::BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Stores v into element i of a fp32 or bf16 buffer (bf16: round to nearest even).
__device__ __forceinline__ void store_f(void* p, DType t, int64_t i, float v) {
  if (t == DType::BF16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// Calls f(T{}) with the storage type of dtype d: __nv_bfloat16 for bf16, float otherwise (callers have checked that
// d is one of the two).
template <class F>
void with_type(DType d, F&& f) {
  if (d == DType::BF16)
    f(__nv_bfloat16{});
  else
    f(float{});
}

// ---- 16-byte vector I/O (the fast paths of the memory-bound kernels) ------------------------------
// kVec<T>: elements of T in 16 bytes. load_n / store_n move N elements (N * sizeof(T) a multiple of
// 16; p 16-byte aligned) between memory and fp32 registers; bf16 stores round to nearest even,
// like store_f.
template <class T>
inline constexpr int kVec = int(16 / sizeof(T));

__device__ __forceinline__ void unpack16(const uint4& u, float* out, const float*) {
  out[0] = __uint_as_float(u.x);
  out[1] = __uint_as_float(u.y);
  out[2] = __uint_as_float(u.z);
  out[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void unpack16(const uint4& u, float* out, const __nv_bfloat16*) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = __uint_as_float(w[k] << 16);
    out[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 pack16(const float* in, const float*) {
  return make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]), __float_as_uint(in[3]));
}
__device__ __forceinline__ uint4 pack16(const float* in, const __nv_bfloat16*) {
  unsigned w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
    w[k] = *reinterpret_cast<const unsigned*>(&h);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int N, class T>
__device__ __forceinline__ void load_n(const T* p, float* out) {
  static_assert((N * sizeof(T)) % 16 == 0, "load_n moves whole 16-byte vectors");
#pragma unroll
  for (int k = 0; k < N / kVec<T>; ++k) unpack16(__ldg(reinterpret_cast<const uint4*>(p) + k), out + k * kVec<T>, p);
}

// As load_n, without the read-only cache path (for buffers the same kernel may also write).
template <int N, class T>
__device__ __forceinline__ void load_n_rw(const T* p, float* out) {
  static_assert((N * sizeof(T)) % 16 == 0, "load_n moves whole 16-byte vectors");
#pragma unroll
  for (int k = 0; k < N / kVec<T>; ++k) unpack16(reinterpret_cast<const uint4*>(p)[k], out + k * kVec<T>, p);
}

template <int N, class T>
__device__ __forceinline__ void store_n(T* p, const float* in) {
  static_assert((N * sizeof(T)) % 16 == 0, "store_n moves whole 16-byte vectors");
#pragma unroll
  for (int k = 0; k < N / kVec<T>; ++k) reinterpret_cast<uint4*>(p)[k] = pack16(in + k * kVec<T>, p);
}

// V elements at p as fp32 and back: V = 1 one element (any alignment), else whole 16-byte vectors
// (load_n / store_n). bf16 stores round to nearest even.
template <int V, class T>
__device__ __forceinline__ void load_v(const T* p, float* out) {
  if constexpr (V == 1)
    out[0] = float(p[0]);
  else
    load_n<V>(p, out);
}
// As load_v, without the read-only cache path (load_n_rw): for buffers the kernel may also write.
template <int V, class T>
__device__ __forceinline__ void load_v_rw(const T* p, float* out) {
  if constexpr (V == 1)
    out[0] = float(p[0]);
  else
    load_n_rw<V>(p, out);
}
template <int V, class T>
__device__ __forceinline__ void store_v(T* p, const float* in) {
  if constexpr (V == 1)
    p[0] = T(in[0]);
  else
    store_n<V>(p, in);
}

// Calls f(T{}, std::integral_constant<int, V>{}) with the storage type of dtype d (with_type) and the vector width V:
// kVec<T> when vec(kVec<T>) says every width and pointer the kernel touches allows whole 16-byte vectors, else 1.
template <class Pred, class F>
void with_type_and_width(DType d, Pred&& vec, F&& f) {
  with_type(d, [&](auto t) {
    using T = decltype(t);
    if (vec(int64_t(kVec<T>)))
      f(t, std::integral_constant<int, kVec<T>>{});
    else
      f(t, std::integral_constant<int, 1>{});
  });
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
// sigmoid with the approximate exp and reciprocal (relative error about 1e-6, 0 for v below about
// -88): a few instructions instead of about twenty, for the kernels that are issue bound on it.
__device__ __forceinline__ float fast_sigmoid(float v) { return __fdividef(1.0f, 1.0f + __expf(-v)); }
// log(1 + e^x) without overflow or cancellation (the CPU reference's cpu_math.h softplus).
__device__ __forceinline__ float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

// Raw 16-byte words of N elements (for prefetching into registers), and their conversion.
template <class T, int N>
inline constexpr int kWords = int(N * sizeof(T) / 16);
template <int N, class T>
__device__ __forceinline__ void load_raw(const T* p, uint4* words) {
#pragma unroll
  for (int k = 0; k < kWords<T, N>; ++k) words[k] = __ldg(reinterpret_cast<const uint4*>(p) + k);
}
template <int N, class T>
__device__ __forceinline__ void unpack_raw(const uint4* words, float* out, const T* tag) {
#pragma unroll
  for (int k = 0; k < kWords<T, N>; ++k) unpack16(words[k], out + k * kVec<T>, tag);
}

// 8-byte words: 4 bf16 or 2 fp32 elements (as unpack16 / pack16).
__device__ __forceinline__ void unpack8(const uint2& u, float* out, const float*) {
  out[0] = __uint_as_float(u.x);
  out[1] = __uint_as_float(u.y);
}
__device__ __forceinline__ void unpack8(const uint2& u, float* out, const __nv_bfloat16*) {
  out[0] = __uint_as_float(u.x << 16);
  out[1] = __uint_as_float(u.x & 0xffff0000u);
  out[2] = __uint_as_float(u.y << 16);
  out[3] = __uint_as_float(u.y & 0xffff0000u);
}
__device__ __forceinline__ uint2 pack8(const float* in, const float*) {
  return make_uint2(__float_as_uint(in[0]), __float_as_uint(in[1]));
}
__device__ __forceinline__ uint2 pack8(const float* in, const __nv_bfloat16*) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(in[0], in[1]), hi = __floats2bfloat162_rn(in[2], in[3]);
  return make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
}

// One vector of V elements kept packed in registers (loads issued ahead of their use): the element
// itself when V == 1, else one 8- or 16-byte word. A default Packed unpacks to zeros. p must be
// aligned to the vector's size; bf16 stores round to nearest even.
template <class T, int V>
using Packed = std::conditional_t<V == 1, T, std::conditional_t<V * sizeof(T) == 8, uint2, uint4>>;
template <int V, class T>
__device__ __forceinline__ Packed<T, V> load_packed(const T* p) {
  static_assert(V == 1 || V * sizeof(T) == 8 || V * sizeof(T) == 16, "a packed vector is 1 element, 8 or 16 bytes");
  if constexpr (V == 1)
    return p[0];
  else
    return __ldg(reinterpret_cast<const Packed<T, V>*>(p));
}
template <int V, class T>
__device__ __forceinline__ void unpack_v(const Packed<T, V>& v, float* out) {
  if constexpr (V == 1)
    out[0] = float(v);
  else if constexpr (V * sizeof(T) == 8)
    unpack8(v, out, static_cast<const T*>(nullptr));
  else
    unpack16(v, out, static_cast<const T*>(nullptr));
}
template <int V, class T>
__device__ __forceinline__ void store_packed(T* p, const float* in) {
  if constexpr (V == 1)
    p[0] = T(in[0]);
  else if constexpr (V * sizeof(T) == 8)
    *reinterpret_cast<uint2*>(p) = pack8(in, p);
  else
    *reinterpret_cast<uint4*>(p) = pack16(in, p);
}

// v rounded to T and back (the value a store_n + load_n round trip gives).
template <int N, class T>
__device__ __forceinline__ void round_n(float* v) {
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Raises a kernel's dynamic shared-memory limit to `bytes` when over the default 48 KiB (the SSD and
// gated delta rule kernels).
template <class K>
void allow_smem(K kernel, int64_t bytes, const char* name) {
  if (bytes > 48 * 1024)
    cuda_check(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(bytes)),
               name);
}

// The last index e in [0, n) with a[e] <= v, a ascending and a[0] <= v (e.g. the group of row v from the
// groups' first rows): a binary search.
__device__ __forceinline__ int last_at_most(const int32_t* a, int n, int64_t v) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a[mid] <= v)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32 (<= 1024);
// `red` is 32 floats of shared memory. Each thread adds the warp totals in the same order.
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int nwarps = blockDim.x / 32;
  __syncthreads();  // a previous call may still be reading red
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < nwarps; ++w) r += red[w];
  return r;
}

// Fixed-order sum over chunks of fp32 partials part (chunks, M) (the deterministic weight gradients),
// for a block of 32 columns x kChunkWarps warps: warp w adds chunks w, w + kChunkWarps, ... of column
// i (its lane's), then warp 0 gets the warps' sums added in warp order (the other warps get 0).
constexpr int kChunkWarps = 16;
__device__ __forceinline__ float chunk_sum(const float* part, int64_t chunks, int64_t M, int64_t i) {
  __shared__ float red[kChunkWarps][33];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  float s = 0.0f;
  if (i < M)
    for (int64_t k = wid; k < chunks; k += kChunkWarps) s += part[k * M + i];
  red[wid][lane] = s;
  __syncthreads();
  float t = 0.0f;
  if (wid == 0)
    for (int w = 0; w < kChunkWarps; ++w) t += red[w][lane];
  return t;
}

// Maximum over the block, returned to every thread (same contract as block_sum).
__device__ __forceinline__ float block_max(float v, float* red) {
  v = warp_max(v);
  const int nwarps = blockDim.x / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < nwarps; ++w) r = fmaxf(r, red[w]);
  return r;
}

}  // namespace hytra::cuda
