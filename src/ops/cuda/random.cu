// random_normal on CUDA: the same core/philox.h functions as the CPU, one element per thread.
#include "core/philox.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

__global__ void random_normal_kernel(void* y, DType t, int64_t n, uint64_t seed, uint64_t stream, double mean,
                                     double std) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(y, t, i, float(mean + std * double(philox_normal(seed, stream, uint64_t(i)))));
}

}  // namespace

void random_normal(Exec& ex, Tensor& y, uint64_t seed, uint64_t stream, double mean, double std) {
  const int64_t n = y.numel();
  if (n == 0) return;
  random_normal_kernel<<<grid_for(n, 256), 256, 0, stream_of(ex)>>>(y.raw(), y.dtype(), n, seed, stream, mean, std);
  check_launch("random_normal_kernel");
}

}  // namespace hytra::cuda
