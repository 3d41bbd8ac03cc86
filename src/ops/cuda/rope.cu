// Rotary position embedding (ops.h "rotary position embedding"; docs/spec/README.md decision 7).
// Token t, pair i < R/2: inv_freq = 1 / base^(2i/R) and angle = t * inv_freq in fp32 (Megatron);
// pairs (i, i + R/2) rotate-half or (2i, 2i+1) interleaved:
//   y_a = x_a cos - x_b sin,  y_b = x_b cos + x_a sin   (backward: the same with -sin).
// One thread per pair reads both inputs before writing, so y may alias x; channels >= R are
// copied when y is a different buffer.
// Vector path (rotated channels in groups of 8 per half, or of 8 for interleaved, D % 8 == 0,
// aligned): one block per token (b, t) computes its R/2 cos/sin pairs once into shared memory with
// the same fp32 formulas, then each thread rotates 8 pairs (rotate-half: 16 bytes from each half)
// or 4 (interleaved: 8 adjacent channels) of one head with the same arithmetic; pass-through
// channels move 8 at a time.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/rope_math.cuh"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(void* y, const void* x, DType t, int64_t rows, int64_t T, int64_t H, int64_t D,
                            int64_t R, float base, bool interleaved, float sign) {
  const int64_t half = R / 2, total = rows * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / half, i = e % half;
    const int64_t pos = (row / H) % T;
    const float inv_freq = rope_inv_freq(i, R, base);
    const float angle = float(pos) * inv_freq;
    const int64_t a = row * D + (interleaved ? 2 * i : i);
    const int64_t b = row * D + (interleaved ? 2 * i + 1 : i + half);
    const float2 r = rope_rotate(load_f(x, t, a), load_f(x, t, b), make_float2(cosf(angle), sign * sinf(angle)));
    store_f(y, t, a, r.x);
    store_f(y, t, b, r.y);
  }
}

__global__ void rope_passthrough_kernel(void* y, const void* x, DType t, int64_t rows, int64_t D, int64_t R) {
  const int64_t rest = D - R, total = rows * rest;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = (e / rest) * D + R + e % rest;
    store_f(y, t, i, load_f(x, t, i));
  }
}

// Vector path. Block = one (b, t): its cos/sin of the R/2 frequencies go to shared memory (same
// formulas as the scalar kernel), then items (head, group) of that token: groups [0, g_rot) rotate,
// [g_rot, g_all) copy 8 pass-through channels.
template <class T>
__global__ void rope_vec_kernel(T* y, const T* x, int64_t T_len, int64_t H, int64_t D, int64_t R, float base,
                                float sign, bool interleaved, int64_t g_rot, int64_t g_all) {
  extern __shared__ float2 cs[];  // (R/2)
  const int64_t half = R / 2;
  const int64_t pos = blockIdx.x % T_len;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float inv_freq = rope_inv_freq(i, R, base);
    const float angle = float(pos) * inv_freq;
    cs[i] = make_float2(cosf(angle), sign * sinf(angle));
  }
  __syncthreads();
  const int64_t base_row = int64_t(blockIdx.x) * H;
  for (int64_t e = threadIdx.x; e < H * g_all; e += blockDim.x) {
    const int64_t row = base_row + e / g_all, g = e % g_all;
    const T* xr = x + row * D;
    T* yr = y + row * D;
    if (g >= g_rot) {  // pass-through
      float v[8];
      const int64_t c = R + (g - g_rot) * 8;
      load_n_rw<8>(xr + c, v);
      store_n<8>(yr + c, v);
      continue;
    }
    if (interleaved) {  // channels 8g .. 8g+7 = pairs 4g .. 4g+3
      float v[8];
      load_n_rw<8>(xr + 8 * g, v);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 r = rope_rotate(v[2 * p], v[2 * p + 1], cs[4 * g + p]);
        v[2 * p] = r.x;
        v[2 * p + 1] = r.y;
      }
      store_n<8>(yr + 8 * g, v);
    } else {  // pairs (i, i + half), i = 8g .. 8g+7
      float a[8], b[8];
      load_n_rw<8>(xr + 8 * g, a);
      load_n_rw<8>(xr + half + 8 * g, b);
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        const float2 r = rope_rotate(a[p], b[p], cs[8 * g + p]);
        a[p] = r.x;
        b[p] = r.y;
      }
      store_n<8>(yr + 8 * g, a);
      store_n<8>(yr + half + 8 * g, b);
    }
  }
}

void rope(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved, float sign) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "rope on CUDA: unsupported dtype ", x.desc());
  const int64_t T = x.size(1), H = x.size(2), D = x.size(3);
  const int64_t rows = x.size(0) * T * H;
  if (rows == 0) return;
  cudaStream_t s = stream_of(ex);
  const int64_t R = rotary_dim, half = R / 2;
  const bool vec = (interleaved ? R % 8 == 0 : half % 8 == 0) && D % 8 == 0 && aligned16(x.raw()) &&
                   aligned16(y.raw());
  if (vec && half > 0 && x.size(0) * T < (int64_t(1) << 31)) {
    const int64_t g_rot = interleaved ? R / 8 : half / 8;
    const int64_t g_all = g_rot + (y.raw() != x.raw() ? (D - R) / 8 : 0);
    const int64_t items = H * g_all;
    const int threads = int(items >= 256 ? 256 : (items + 31) / 32 * 32);
    const unsigned blocks = unsigned(x.size(0) * T);
    const size_t smem = size_t(half) * sizeof(float2);
    if (x.dtype() == DType::BF16)
      rope_vec_kernel<<<blocks, threads, smem, s>>>(static_cast<__nv_bfloat16*>(y.raw()),
                                                   static_cast<const __nv_bfloat16*>(x.raw()), T, H, D, R,
                                                   float(base), sign, interleaved, g_rot, g_all);
    else
      rope_vec_kernel<<<blocks, threads, smem, s>>>(y.data<float>(), x.data<float>(), T, H, D, R, float(base), sign,
                                                   interleaved, g_rot, g_all);
    check_launch("rope_vec_kernel");
    return;
  }
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
