// mtp_shift on CUDA: one block walks the (B,T) tokens in strides, rolling ids and labels and
// counting the targets with __syncthreads_count (an integer count, so the order of threads cannot
// change it), then writes the loss gradient. B*T is a micro-batch's token count: one block suffices.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void mtp_shift_kernel(int32_t* ids_next, int32_t* labels_next, void* dloss, DType dt, float* targets,
                                 const int32_t* ids, const int32_t* labels, int64_t n, int64_t T, double scale,
                                 double grad_scale) {
  int64_t count = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    bool target = false;
    if (i < n) {
      const bool last = (i % T) + 1 == T;
      const int32_t label = last ? -1 : labels[i + 1];
      ids_next[i] = last ? 0 : ids[i + 1];
      labels_next[i] = label;
      target = label >= 0;
    }
    count += __syncthreads_count(target);
  }
  const float w = float(scale / double(count > 1 ? count : 1) * grad_scale);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const bool target = (i % T) + 1 != T && labels[i + 1] >= 0;
    store_f(dloss, dt, i, target ? w : 0.0f);
  }
  if (threadIdx.x == 0) targets[0] = float(count);
}

}  // namespace

void mtp_shift(Exec& ex, Tensor& ids_next, Tensor& labels_next, Tensor& dloss, Tensor& targets, const Tensor& ids,
               const Tensor& labels, double scale, double grad_scale) {
  HYTRA_CHECK(dloss.dtype() == DType::F32 && targets.dtype() == DType::F32,
              "mtp_shift on CUDA: dloss and targets "
              "must be fp32, got ",
              dloss.desc(), " and ", targets.desc());
  mtp_shift_kernel<<<1, kThreads, 0, stream_of(ex)>>>(
      ids_next.data<int32_t>(), labels_next.data<int32_t>(), dloss.raw(), dloss.dtype(), targets.data<float>(),
      ids.data<int32_t>(), labels.data<int32_t>(), ids.numel(), ids.size(1), scale, grad_scale);
  check_launch("mtp_shift_kernel");
}

}  // namespace hytra::cuda
