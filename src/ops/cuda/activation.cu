// Activations (ops.h "activations"), one thread per output element, math in fp32. With one dtype for
// all tensors, 16-byte aligned buffers and a multiple of 8 elements (SwiGLU: F % 8 == 0) an op takes
// the vector path: 8 outputs per thread and step, 16-byte loads and stores, the same formulas (bitwise
// equal results).
//   SwiGLU (gate = first half):  y = silu(g) * u,  silu(g) = g * sigmoid(g)
//     dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dy * silu(g)
//   GeLU (exact):  y = x * Phi(x);  dx = dy * (Phi(x) + x * phi(x)),  phi(x) = exp(-x^2/2) / sqrt(2 pi)
//   Squared ReLU:  y = max(x, 0)^2;  dx = dy * 2 * max(x, 0)
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

enum class Act : int { Gelu, Sqrelu };

__global__ void swiglu_fwd_kernel(void* y, DType yt, const void* x, DType xt, int64_t N, int64_t F) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * F; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / F, f = e % F;
    const float g = load_f(x, xt, n * 2 * F + f), u = load_f(x, xt, n * 2 * F + F + f);
    store_f(y, yt, e, g * sigmoid(g) * u);
  }
}

__global__ void swiglu_bwd_kernel(void* dx, DType dxt, const void* dy, DType dyt, const void* x, DType xt, int64_t N,
                                  int64_t F) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * F; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / F, f = e % F;
    const float g = load_f(x, xt, n * 2 * F + f), u = load_f(x, xt, n * 2 * F + F + f);
    const float d = load_f(dy, dyt, e), sg = sigmoid(g);
    store_f(dx, dxt, n * 2 * F + f, d * u * sg * (1.0f + g * (1.0f - sg)));
    store_f(dx, dxt, n * 2 * F + F + f, d * g * sg);
  }
}

template <class T>
__global__ void swiglu_fwd_vec_kernel(T* y, const T* x, int64_t N, int64_t F) {
  const int64_t f8 = F / 8, total = N * f8;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / f8, f = (e % f8) * 8;
    float g[8], u[8], o[8];
    load_n<8>(x + n * 2 * F + f, g);
    load_n<8>(x + n * 2 * F + F + f, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = g[i] * sigmoid(g[i]) * u[i];
    store_n<8>(y + n * F + f, o);
  }
}

template <class T>
__global__ void swiglu_bwd_vec_kernel(T* dx, const T* dy, const T* x, int64_t N, int64_t F) {
  const int64_t f8 = F / 8, total = N * f8;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / f8, f = (e % f8) * 8;
    float g[8], u[8], d[8], dg[8], du[8];
    load_n<8>(x + n * 2 * F + f, g);
    load_n<8>(x + n * 2 * F + F + f, u);
    load_n<8>(dy + n * F + f, d);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float sg = sigmoid(g[i]);
      dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
      du[i] = d[i] * g[i] * sg;
    }
    store_n<8>(dx + n * 2 * F + f, dg);
    store_n<8>(dx + n * 2 * F + F + f, du);
  }
}

// The vector path applies: one dtype, a multiple of 8 elements per row (F), aligned buffers.
bool vec_ok(int64_t F, std::initializer_list<const Tensor*> ts) {
  if (F % 8 != 0) return false;
  for (const Tensor* t : ts)
    if (t->dtype() != (*ts.begin())->dtype() || !aligned16(t->raw())) return false;
  return true;
}

// Blocks for n vector items: enough to fill the GPU, grid-stride beyond.
unsigned vec_grid(int64_t n) { return grid_for(n, kThreads); }

__device__ __forceinline__ float act_fwd(Act a, float v) {
  if (a == Act::Gelu) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  float r = fmaxf(v, 0.0f);
  return r * r;
}

__device__ __forceinline__ float act_grad(Act a, float v) {
  if (a == Act::Gelu) {
    float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    return cdf + v * pdf;
  }
  return 2.0f * fmaxf(v, 0.0f);
}

template <Act A, class T>
__global__ void act_fwd_vec_kernel(T* y, const T* x, int64_t n8) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n8; e += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    load_n<8>(x + 8 * e, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = act_fwd(A, v[i]);
    store_n<8>(y + 8 * e, v);
  }
}

template <Act A, class T>
__global__ void act_bwd_vec_kernel(T* dx, const T* dy, const T* x, int64_t n8) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n8; e += int64_t(gridDim.x) * blockDim.x) {
    float v[8], d[8];
    load_n<8>(x + 8 * e, v);
    load_n<8>(dy + 8 * e, d);
#pragma unroll
    for (int i = 0; i < 8; ++i) d[i] *= act_grad(A, v[i]);
    store_n<8>(dx + 8 * e, d);
  }
}

__global__ void act_fwd_kernel(Act a, void* y, DType yt, const void* x, DType xt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(y, yt, i, act_fwd(a, load_f(x, xt, i)));
}

__global__ void act_bwd_kernel(Act a, void* dx, DType dxt, const void* dy, DType dyt, const void* x, DType xt,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(dx, dxt, i, load_f(dy, dyt, i) * act_grad(a, load_f(x, xt, i)));
}

void check_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", t->desc());
}

void act_fwd(Exec& ex, Act a, const char* op, Tensor& y, const Tensor& x) {
  check_dtypes(op, {&y, &x});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(ex);
  if (vec_ok(n, {&y, &x})) {
    using bf = __nv_bfloat16;
    auto launch = [&](auto kernel, auto* yp, const auto* xp) {
      kernel<<<vec_grid(n / 8), kThreads, 0, s>>>(yp, xp, n / 8);
    };
    const bool bf16 = x.dtype() == DType::BF16, gelu = a == Act::Gelu;
    if (bf16) {
      auto* yp = static_cast<bf*>(y.raw());
      auto* xp = static_cast<const bf*>(x.raw());
      gelu ? launch(act_fwd_vec_kernel<Act::Gelu, bf>, yp, xp) : launch(act_fwd_vec_kernel<Act::Sqrelu, bf>, yp, xp);
    } else {
      gelu ? launch(act_fwd_vec_kernel<Act::Gelu, float>, y.data<float>(), x.data<float>())
           : launch(act_fwd_vec_kernel<Act::Sqrelu, float>, y.data<float>(), x.data<float>());
    }
    check_launch("act_fwd_vec_kernel");
    return;
  }
  act_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(a, y.raw(), y.dtype(), x.raw(), x.dtype(), n);
  check_launch("act_fwd_kernel");
}

void act_bwd(Exec& ex, Act a, const char* op, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_dtypes(op, {&dx, &dy, &x});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(ex);
  if (vec_ok(n, {&dx, &dy, &x})) {
    using bf = __nv_bfloat16;
    auto launch = [&](auto kernel, auto* dxp, const auto* dyp, const auto* xp) {
      kernel<<<vec_grid(n / 8), kThreads, 0, s>>>(dxp, dyp, xp, n / 8);
    };
    const bool gelu = a == Act::Gelu;
    if (x.dtype() == DType::BF16) {
      auto* dxp = static_cast<bf*>(dx.raw());
      auto *dyp = static_cast<const bf*>(dy.raw()), *xp = static_cast<const bf*>(x.raw());
      gelu ? launch(act_bwd_vec_kernel<Act::Gelu, bf>, dxp, dyp, xp)
           : launch(act_bwd_vec_kernel<Act::Sqrelu, bf>, dxp, dyp, xp);
    } else {
      gelu ? launch(act_bwd_vec_kernel<Act::Gelu, float>, dx.data<float>(), dy.data<float>(), x.data<float>())
           : launch(act_bwd_vec_kernel<Act::Sqrelu, float>, dx.data<float>(), dy.data<float>(), x.data<float>());
    }
    check_launch("act_bwd_vec_kernel");
    return;
  }
  act_bwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(a, dx.raw(), dx.dtype(), dy.raw(), dy.dtype(),
                                                                        x.raw(), x.dtype(), n);
  check_launch("act_bwd_kernel");
}

}  // namespace

void swiglu_fwd(Exec& ex, Tensor& y, const Tensor& x) {
  check_dtypes("swiglu_fwd", {&y, &x});
  const int64_t N = y.size(0), F = y.size(1);
  if (N * F == 0) return;
  cudaStream_t s = stream_of(ex);
  if (vec_ok(F, {&y, &x})) {
    if (x.dtype() == DType::BF16)
      swiglu_fwd_vec_kernel<<<vec_grid(N * F / 8), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(y.raw()),
                                                                      static_cast<const __nv_bfloat16*>(x.raw()), N, F);
    else
      swiglu_fwd_vec_kernel<<<vec_grid(N * F / 8), kThreads, 0, s>>>(y.data<float>(), x.data<float>(), N, F);
    check_launch("swiglu_fwd_vec_kernel");
    return;
  }
  swiglu_fwd_kernel<<<grid_for(N * F, kThreads), kThreads, 0, s>>>(y.raw(), y.dtype(), x.raw(), x.dtype(), N, F);
  check_launch("swiglu_fwd_kernel");
}

void swiglu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_dtypes("swiglu_bwd", {&dx, &dy, &x});
  const int64_t N = dy.size(0), F = dy.size(1);
  if (N * F == 0) return;
  cudaStream_t s = stream_of(ex);
  if (vec_ok(F, {&dx, &dy, &x})) {
    using bf = __nv_bfloat16;
    if (x.dtype() == DType::BF16)
      swiglu_bwd_vec_kernel<<<vec_grid(N * F / 8), kThreads, 0, s>>>(
          static_cast<bf*>(dx.raw()), static_cast<const bf*>(dy.raw()), static_cast<const bf*>(x.raw()), N, F);
    else
      swiglu_bwd_vec_kernel<<<vec_grid(N * F / 8), kThreads, 0, s>>>(dx.data<float>(), dy.data<float>(),
                                                                      x.data<float>(), N, F);
    check_launch("swiglu_bwd_vec_kernel");
    return;
  }
  swiglu_bwd_kernel<<<grid_for(N * F, kThreads), kThreads, 0, s>>>(dx.raw(), dx.dtype(), dy.raw(), dy.dtype(),
                                                                    x.raw(), x.dtype(), N, F);
  check_launch("swiglu_bwd_kernel");
}

void gelu_fwd(Exec& ex, Tensor& y, const Tensor& x) { act_fwd(ex, Act::Gelu, "gelu_fwd", y, x); }
void gelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) { act_bwd(ex, Act::Gelu, "gelu_bwd", dx, dy, x); }
void sqrelu_fwd(Exec& ex, Tensor& y, const Tensor& x) { act_fwd(ex, Act::Sqrelu, "sqrelu_fwd", y, x); }
void sqrelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) {
  act_bwd(ex, Act::Sqrelu, "sqrelu_bwd", dx, dy, x);
}

}  // namespace hytra::cuda
