// The vocabulary-parallel helpers on CUDA (ops.h "vocabulary-parallel embedding and cross-entropy"): one thread per
// row each, the same arithmetic as the CPU reference in fp32 (the shards' log-sum-exp in shard order).
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void shard_ids_kernel(int32_t* out, const int32_t* ids, int64_t n, int64_t start, int64_t count,
                                 int64_t outside) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    out[i] = id >= start && id < start + count ? int32_t(id - start) : id < 0 ? -1 : int32_t(outside);
  }
}

__global__ void shard_target_kernel(float* target, const float* loss, const float* lse, const int32_t* labels,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    target[i] = labels[i] >= 0 ? lse[i] - loss[i] : 0.0f;
}

__global__ void shard_combine_kernel(float* loss, float* lse, const float* parts, const float* target,
                                     const int32_t* labels, int64_t S, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float m = parts[i];
    for (int64_t s = 1; s < S; ++s) m = fmaxf(m, parts[s * n + i]);
    float sum = 0.0f;
    for (int64_t s = 0; s < S; ++s) sum += expf(parts[s * n + i] - m);
    const float l = m + logf(sum);
    lse[i] = l;
    loss[i] = labels[i] < 0 ? 0.0f : l - target[i];
  }
}

}  // namespace

void vocab_shard_ids(Exec& ex, Tensor& out, const Tensor& ids, int64_t start, int64_t count, int64_t outside) {
  const int64_t n = ids.numel();
  if (n == 0) return;
  shard_ids_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(out.data<int32_t>(), ids.data<int32_t>(), n,
                                                                          start, count, outside);
  check_launch("shard_ids_kernel");
}

void ce_shard_target(Exec& ex, Tensor& target, const Tensor& loss, const Tensor& lse, const Tensor& shard_labels) {
  const int64_t n = loss.numel();
  if (n == 0) return;
  shard_target_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(
      target.data<float>(), loss.data<float>(), lse.data<float>(), shard_labels.data<int32_t>(), n);
  check_launch("shard_target_kernel");
}

void ce_shard_combine(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& lse_parts, const Tensor& target,
                      const Tensor& labels) {
  const int64_t n = labels.numel();
  if (n == 0) return;
  shard_combine_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(
      loss.data<float>(), lse.data<float>(), lse_parts.data<float>(), target.data<float>(), labels.data<int32_t>(),
      lse_parts.size(0), n);
  check_launch("shard_combine_kernel");
}

}  // namespace hytra::cuda
