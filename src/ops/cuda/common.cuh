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
