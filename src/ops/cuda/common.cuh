// Shared pieces of the CUDA kernels: the executor's stream, launch checks, grid sizing,
// fp32/bf16 loads and stores chosen at run time (math is always fp32), and warp/block reductions
// whose summation order is fixed by the block size alone (deterministic results).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
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
