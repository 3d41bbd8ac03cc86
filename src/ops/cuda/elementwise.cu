// Elementwise ops (ops.h "elementwise"): fill, copy (with dtype conversion), add, axpy, scale.
// Grid-stride loops, one element per thread per step; each tensor's dtype is read at run time
// (fp32/bf16 math in fp32; copy and fill also take int32/int64). Each output element has one writer.
// Fast path for add, axpy and fp32 <-> bf16 copies with 16-byte aligned buffers: the dtypes are
// template arguments and each thread moves 8 elements per step with 16-byte loads and stores (the
// last n % 8 elements one per thread); same arithmetic, so the same bits as the scalar kernels.
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

// Any supported dtype as double (exact for fp32, bf16, int32; int64 beyond 2^53 rounds).
__device__ __forceinline__ double load_any(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::I32: return double(static_cast<const int32_t*>(p)[i]);
    case DType::I64: return double(static_cast<const int64_t*>(p)[i]);
    default: return double(load_f(p, t, i));
  }
}

// Stores v converted to dtype t (floating: via fp32, round to nearest even; integers: truncation).
__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::I32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    default: store_f(p, t, i, float(v)); break;
  }
}

__global__ void fill_kernel(void* y, DType t, int64_t n, double value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_any(y, t, i, value);
}

__global__ void convert_kernel(void* y, DType yt, const void* x, DType xt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_any(y, yt, i, load_any(x, xt, i));
}

__global__ void add_kernel(void* y, DType yt, const void* a, DType at, const void* b, DType bt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(y, yt, i, load_f(a, at, i) + load_f(b, bt, i));
}

__global__ void axpy_kernel(void* y, DType yt, const void* x, DType xt, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(y, yt, i, load_f(y, yt, i) + alpha * load_f(x, xt, i));
}

__global__ void scale_kernel(void* y, DType yt, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(y, yt, i, alpha * load_f(y, yt, i));
}

using bf16_t = __nv_bfloat16;

// Op 0: y = a + b;  op 1: y = y + alpha * a (axpy; b unused);  op 2: y = a (conversion).
template <int OP, class Y, class A, class B>
__global__ void binary_vec_kernel(Y* y, const A* a, const B* b, float alpha, int64_t n) {
  const int64_t n8 = n / 8, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += stride) {
    float va[8], vo[8];
    load_n<8>(a + 8 * i, va);
    if constexpr (OP == 0) {
      float vb[8];
      load_n<8>(b + 8 * i, vb);
#pragma unroll
      for (int e = 0; e < 8; ++e) vo[e] = va[e] + vb[e];
    } else if constexpr (OP == 1) {
      load_n_rw<8>(y + 8 * i, vo);
#pragma unroll
      for (int e = 0; e < 8; ++e) vo[e] = vo[e] + alpha * va[e];
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) vo[e] = va[e];
    }
    store_n<8>(y + 8 * i, vo);
  }
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t < n - 8 * n8) {
    const int64_t i = 8 * n8 + t;
    const float va = float(a[i]);
    float vo;
    if constexpr (OP == 0)
      vo = va + float(b[i]);
    else if constexpr (OP == 1)
      vo = float(y[i]) + alpha * va;
    else
      vo = va;
    if constexpr (sizeof(Y) == 2)
      y[i] = __float2bfloat16_rn(vo);
    else
      y[i] = vo;
  }
}

// Calls f(T{}) for a fp32 or bf16 dtype.
template <class F>
void with_float_type(DType t, F&& f) {
  if (t == DType::BF16)
    f(bf16_t{});
  else
    f(float{});
}

template <int OP>
void launch_vec(Exec& ex, const Tensor& y, const Tensor& a, const Tensor* b, float alpha) {
  const int64_t n = y.numel();
  const unsigned grid = grid_for((n + 7) / 8, kThreads);
  with_float_type(y.dtype(), [&](auto yt) {
    with_float_type(a.dtype(), [&](auto at) {
      using Y = decltype(yt);
      using A = decltype(at);
      if constexpr (OP == 0) {
        with_float_type(b->dtype(), [&](auto bt) {
          using B = decltype(bt);
          binary_vec_kernel<OP, Y, A, B><<<grid, kThreads, 0, stream_of(ex)>>>(
              static_cast<Y*>(y.raw()), static_cast<const A*>(a.raw()), static_cast<const B*>(b->raw()), alpha, n);
        });
      } else {
        binary_vec_kernel<OP, Y, A, A><<<grid, kThreads, 0, stream_of(ex)>>>(
            static_cast<Y*>(y.raw()), static_cast<const A*>(a.raw()), nullptr, alpha, n);
      }
    });
  });
  check_launch("binary_vec_kernel");
}

bool float_aligned(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if ((t->dtype() != DType::F32 && t->dtype() != DType::BF16) || !aligned16(t->raw())) return false;
  return true;
}

void check_cuda_dtype(const char* op, const Tensor& t, bool allow_int) {
  DType d = t.dtype();
  bool ok = d == DType::F32 || d == DType::BF16 || (allow_int && (d == DType::I32 || d == DType::I64));
  HYTRA_CHECK(ok, op, " on CUDA: unsupported dtype ", t.desc());
}

}  // namespace

void fill(Exec& ex, Tensor& y, double value) {
  check_cuda_dtype("fill", y, true);
  const int64_t n = y.numel();
  if (n == 0) return;
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(y.raw(), y.dtype(), n, value);
  check_launch("fill_kernel");
}

void copy(Exec& ex, Tensor& y, const Tensor& x) {
  check_cuda_dtype("copy", y, true);
  check_cuda_dtype("copy", x, true);
  const int64_t n = y.numel();
  if (n == 0 || y.raw() == x.raw()) return;
  if (y.dtype() == x.dtype()) {
    HYTRA_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), y.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ex)));
    return;
  }
  if (float_aligned({&y, &x})) {
    launch_vec<2>(ex, y, x, nullptr, 0.0f);
    return;
  }
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(y.raw(), y.dtype(), x.raw(), x.dtype(), n);
  check_launch("convert_kernel");
}

void add(Exec& ex, Tensor& y, const Tensor& a, const Tensor& b) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&y, &a, &b}) check_cuda_dtype("add", *t, false);
  const int64_t n = y.numel();
  if (n == 0) return;
  if (float_aligned({&y, &a, &b})) {
    launch_vec<0>(ex, y, a, &b, 0.0f);
    return;
  }
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(y.raw(), y.dtype(), a.raw(), a.dtype(), b.raw(),
                                                                    b.dtype(), n);
  check_launch("add_kernel");
}

void axpy(Exec& ex, Tensor& y, const Tensor& x, double alpha) {
  check_cuda_dtype("axpy", y, false);
  check_cuda_dtype("axpy", x, false);
  const int64_t n = y.numel();
  if (n == 0) return;
  if (float_aligned({&y, &x})) {
    launch_vec<1>(ex, y, x, nullptr, float(alpha));
    return;
  }
  axpy_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(y.raw(), y.dtype(), x.raw(), x.dtype(),
                                                                     float(alpha), n);
  check_launch("axpy_kernel");
}

void scale(Exec& ex, Tensor& y, double alpha) {
  check_cuda_dtype("scale", y, false);
  const int64_t n = y.numel();
  if (n == 0) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(y.raw(), y.dtype(), float(alpha), n);
  check_launch("scale_kernel");
}

}  // namespace hytra::cuda
