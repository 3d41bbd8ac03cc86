// Rotary position embedding (ops.h "rotary position embedding"; SPEC hytra decision 7).
// Token t, pair i < R/2: inv_freq = 1 / base^(2i/R) and angle = t * inv_freq in fp32 (Megatron);
// pairs (i, i + R/2) rotate-half or (2i, 2i+1) interleaved:
//   y_a = x_a cos - x_b sin,  y_b = x_b cos + x_a sin   (backward: the same with -sin).
// One thread per pair reads both inputs before writing, so y may alias x; channels >= R are
// copied when y is a different buffer.
// Vector path (rotated channels in groups of 8 per half, or of 8 for interleaved, D % 8 == 0,
// aligned): a (T, R/2) cos/sin table is built first with the same fp32 formulas, then each thread
// rotates 8 pairs (rotate-half: 16 bytes from each half) or 4 (interleaved: 8 adjacent channels)
// with the same arithmetic, so results equal the scalar kernel's bitwise; pass-through channels
// move 8 at a time.
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

// cs[t * half + i] = (cos, sign * sin) of angle t * inv_freq[i].
__global__ void rope_table_kernel(float2* cs, int64_t T, int64_t R, float base, float sign) {
  const int64_t half = R / 2;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < T * half; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pos = e / half, i = e % half;
    const float inv_freq = 1.0f / powf(base, float(2 * i) / float(R));
    const float angle = float(pos) * inv_freq;
    cs[e] = make_float2(cosf(angle), sign * sinf(angle));
  }
}

// Item (row, group): groups [0, G_rot) rotate, [G_rot, G_rot + G_pass) copy 8 pass-through channels.
template <class T>
__global__ void rope_vec_kernel(T* y, const T* x, const float2* cs, int64_t rows, int64_t T_len, int64_t H,
                                int64_t D, int64_t R, bool interleaved, int64_t g_rot, int64_t g_all) {
  const int64_t half = R / 2, total = rows * g_all;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / g_all, g = e % g_all;
    const T* xr = x + row * D;
    T* yr = y + row * D;
    if (g >= g_rot) {  // pass-through
      float v[8];
      const int64_t c = R + (g - g_rot) * 8;
      load_n_rw<8>(xr + c, v);
      store_n<8>(yr + c, v);
      continue;
    }
    const float2* t = cs + ((row / H) % T_len) * half;
    if (interleaved) {  // channels 8g .. 8g+7 = pairs 4g .. 4g+3
      float v[8];
      load_n_rw<8>(xr + 8 * g, v);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 c = t[4 * g + p];
        const float xa = v[2 * p], xb = v[2 * p + 1];
        v[2 * p] = xa * c.x - xb * c.y;
        v[2 * p + 1] = xb * c.x + xa * c.y;
      }
      store_n<8>(yr + 8 * g, v);
    } else {  // pairs (i, i + half), i = 8g .. 8g+7
      float a[8], b[8];
      load_n_rw<8>(xr + 8 * g, a);
      load_n_rw<8>(xr + half + 8 * g, b);
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        const float2 c = t[8 * g + p];
        const float xa = a[p], xb = b[p];
        a[p] = xa * c.x - xb * c.y;
        b[p] = xb * c.x + xa * c.y;
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
  if (vec && half > 0) {
    Tensor cs = Tensor::empty({T * half * 2}, DType::F32, Device::CUDA);  // (T, R/2) of (cos, sin)
    auto* csp = reinterpret_cast<float2*>(cs.data<float>());
    rope_table_kernel<<<grid_for(T * half, kThreads), kThreads, 0, s>>>(csp, T, R, float(base), sign);
    check_launch("rope_table_kernel");
    const int64_t g_rot = interleaved ? R / 8 : half / 8;
    const int64_t g_all = g_rot + (y.raw() != x.raw() ? (D - R) / 8 : 0);
    if (x.dtype() == DType::BF16)
      rope_vec_kernel<<<grid_for(rows * g_all, kThreads), kThreads, 0, s>>>(
          static_cast<__nv_bfloat16*>(y.raw()), static_cast<const __nv_bfloat16*>(x.raw()), csp, rows, T, H, D, R,
          interleaved, g_rot, g_all);
    else
      rope_vec_kernel<<<grid_for(rows * g_all, kThreads), kThreads, 0, s>>>(
          y.data<float>(), x.data<float>(), csp, rows, T, H, D, R, interleaved, g_rot, g_all);
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
