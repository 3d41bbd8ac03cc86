// Rotary position embedding (ops.h "rotary position embedding"; SPEC hytra decision 7).
// Token t, pair i < R/2: inv_freq = 1 / base^(2i/R) and angle = t * inv_freq in fp32 (Megatron);
// pairs (i, i + R/2) rotate-half or (2i, 2i+1) interleaved:
//   y_a = x_a cos - x_b sin,  y_b = x_b cos + x_a sin   (backward: the same with -sin).
// One thread per pair reads both inputs before writing, so y may alias x; channels >= R are
// copied when y is a different buffer.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(void* y, const void* x, DType t, int64_t rows, int64_t T, int64_t H, int64_t D,
                            int64_t R, float base, bool interleaved, float sign) {
  const int64_t half = R / 2, total = rows * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / half, i = e % half;
    const int64_t pos = (row / H) % T;
    const float inv_freq = 1.0f / powf(base, float(2 * i) / float(R));
    const float angle = float(pos) * inv_freq;
    const float c = cosf(angle), s = sign * sinf(angle);
    const int64_t a = row * D + (interleaved ? 2 * i : i);
    const int64_t b = row * D + (interleaved ? 2 * i + 1 : i + half);
    const float xa = load_f(x, t, a), xb = load_f(x, t, b);
    store_f(y, t, a, xa * c - xb * s);
    store_f(y, t, b, xb * c + xa * s);
  }
}

__global__ void rope_passthrough_kernel(void* y, const void* x, DType t, int64_t rows, int64_t D, int64_t R) {
  const int64_t rest = D - R, total = rows * rest;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = (e / rest) * D + R + e % rest;
    store_f(y, t, i, load_f(x, t, i));
  }
}

void rope(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved, float sign) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "rope on CUDA: unsupported dtype ", x.desc());
  const int64_t T = x.size(1), H = x.size(2), D = x.size(3);
  const int64_t rows = x.size(0) * T * H;
  if (rows == 0) return;
  cudaStream_t s = stream_of(ex);
  rope_kernel<<<grid_for(rows * rotary_dim / 2, kThreads), kThreads, 0, s>>>(
      y.raw(), x.raw(), x.dtype(), rows, T, H, D, rotary_dim, float(base), interleaved, sign);
  check_launch("rope_kernel");
  if (rotary_dim < D && y.raw() != x.raw()) {
    rope_passthrough_kernel<<<grid_for(rows * (D - rotary_dim), kThreads), kThreads, 0, s>>>(y.raw(), x.raw(),
                                                                                             x.dtype(), rows, D,
                                                                                             rotary_dim);
    check_launch("rope_passthrough_kernel");
  }
}

}  // namespace

void rope_fwd(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved) {
  rope(ex, y, x, rotary_dim, base, interleaved, 1.0f);
}

void rope_bwd(Exec& ex, Tensor& dx, const Tensor& dy, int64_t rotary_dim, double base, bool interleaved) {
  rope(ex, dx, dy, rotary_dim, base, interleaved, -1.0f);
}

}  // namespace hytra::cuda
