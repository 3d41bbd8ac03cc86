// Full reductions (ops.h "reductions"): out[0] = sum(x) or sum(x^2), fp32 accumulation.
// Deterministic two-pass scheme: pass 1 runs a block count fixed by numel alone (at most
// kPartials), each block summing a grid-stride slice with a fixed tree into partials[block];
// pass 2 is one block adding the partials in index order. No atomics. count_zeros: the same two passes over
// integer counts (exact in any order).
#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPartials = 1024;  // also pass 2's block size

__global__ void reduce_partial_kernel(float* partials, const void* x, DType xt, int64_t n, bool square) {
  __shared__ float red[32];
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = load_f(x, xt, i);
    acc += square ? v * v : v;
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void reduce_final_kernel(float* out, const float* partials, int num_partials) {
  __shared__ float red[32];
  float v = threadIdx.x < num_partials ? partials[threadIdx.x] : 0.0f;
  v = block_sum(v, red);
  if (threadIdx.x == 0) out[0] = v;
}

void reduce(Exec& ex, Tensor& out, const Tensor& x, bool square) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "sum on CUDA: unsupported dtype ", x.desc());
  const int64_t n = x.numel();
  int64_t blocks = (n + kThreads * 4 - 1) / (kThreads * 4);  // >= 4 elements per thread
  if (blocks < 1) blocks = 1;
  if (blocks > kPartials) blocks = kPartials;
  Tensor partials = Tensor::empty({blocks}, DType::F32, Device::CUDA);  // (blocks)
  cudaStream_t s = stream_of(ex);
  reduce_partial_kernel<<<unsigned(blocks), kThreads, 0, s>>>(partials.data<float>(), x.raw(), x.dtype(), n, square);
  check_launch("reduce_partial_kernel");
  reduce_final_kernel<<<1, kPartials, 0, s>>>(out.data<float>(), partials.data<float>(), int(blocks));
  check_launch("reduce_final_kernel");
}

__global__ void count_partial_kernel(unsigned long long* partials, const void* x, DType xt, int64_t n) {
  __shared__ unsigned long long red[kThreads];
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    c += load_f(x, xt, i) == 0.0f;
  red[threadIdx.x] = c;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = red[0];
}

__global__ void count_final_kernel(int64_t* out, const unsigned long long* partials, int num_partials) {
  if (threadIdx.x != 0) return;
  unsigned long long c = 0;
  for (int i = 0; i < num_partials; ++i) c += partials[i];
  out[0] = int64_t(c);
}

}  // namespace

void count_zeros(Exec& ex, Tensor& out, const Tensor& x) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "count_zeros on CUDA: unsupported dtype ", x.desc());
  const int64_t n = x.numel();
  const int64_t blocks = std::clamp<int64_t>((n + kThreads * 4 - 1) / (kThreads * 4), 1, kPartials);
  Tensor partials = Tensor::empty({blocks}, DType::I64, Device::CUDA);  // (blocks)
  cudaStream_t s = stream_of(ex);
  auto* p = reinterpret_cast<unsigned long long*>(partials.data<int64_t>());
  count_partial_kernel<<<unsigned(blocks), kThreads, 0, s>>>(p, x.raw(), x.dtype(), n);
  check_launch("count_partial_kernel");
  count_final_kernel<<<1, 32, 0, s>>>(out.data<int64_t>(), p, int(blocks));
  check_launch("count_final_kernel");
}

void sum(Exec& ex, Tensor& out, const Tensor& x) { reduce(ex, out, x, false); }

void sum_squares(Exec& ex, Tensor& out, const Tensor& x) { reduce(ex, out, x, true); }

}  // namespace hytra::cuda
