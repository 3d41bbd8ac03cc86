// RMSNorm and LayerNorm, forward and backward (ops.h "norms"), statistics in fp32.
//   RMSNorm:   r = 1/sqrt(mean(x^2) + eps);  y = x * r * w
//              dx = r * g - x * r^3 * mean(g * x),  g = dy * w;          dw += sum_n dy * x * r
//   LayerNorm: mu = mean(x), r = 1/sqrt(mean((x - mu)^2) + eps), xh = (x - mu) * r, y = xh * w + b
//              dx = r * (g - mean(g) - xh * mean(g * xh));  dw += sum_n dy * xh;  db += sum_n dy
//   add_rmsnorm_fwd: x = round(a + b) (stored to sum) then RMSNorm; rmsnorm_bwd_add: dx = dres + dx_norm
// RMSNorm fast path (activations bf16 or fp32 of one dtype, w bf16 or fp32, C % 8 == 0, 16-byte
// aligned rows): one block per row (forward) holding the row in registers as 16-byte vectors, each
// thread owning the same NV vectors of every row; backward blocks take a fixed chunk of rows (set
// by N alone), compute dx row by row (prefetching the next row) and keep their dw partial in
// registers, written to fp32 partials [chunks, C]; a second kernel adds the chunks in order.
// Other layouts and LayerNorm use the scalar kernels below: one block per row, block reductions
// in a fixed order; weight gradients from a separate pass over row chunks into the same partials.
// The fused ops take the same path and block shape as the unfused ones for a given (N, C, dtypes,
// alignment), so add_rmsnorm_fwd equals add + rmsnorm_fwd bitwise.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColThreads = 256;
constexpr int64_t kMaxChunks = 128;

// Scalar path. With b != nullptr, x is a: the row is a + b, stored rounded to sum and read back.
__global__ void rmsnorm_fwd_kernel(void* y, float* rstd, const void* x, DType xt, const void* w, DType wt, int64_t C,
                                   float eps, const void* b, void* sum) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x * C;
  const void* src = b != nullptr ? sum : x;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = load_f(x, xt, row + c);
    if (b != nullptr) {
      store_f(sum, xt, row + c, v + load_f(b, xt, row + c));
      v = load_f(sum, xt, row + c);
    }
    ss += v * v;
  }
  const float r = 1.0f / sqrtf(block_sum(ss, red) / float(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    store_f(y, xt, row + c, load_f(src, xt, row + c) * r * load_f(w, wt, c));
}

// Scalar path; dres (nullable) is added before the one rounding.
__global__ void rmsnorm_bwd_dx_kernel(void* dx, DType dxt, const void* dy, DType dyt, const void* x, DType xt,
                                      const void* w, DType wt, const float* rstd, int64_t C, const void* dres,
                                      DType drt) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x * C;
  const float r = rstd[blockIdx.x];
  float gx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    gx += load_f(dy, dyt, row + c) * load_f(w, wt, c) * load_f(x, xt, row + c);
  const float coef = r * r * r * block_sum(gx, red) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float g = load_f(dy, dyt, row + c) * load_f(w, wt, c);
    float d = r * g - load_f(x, xt, row + c) * coef;
    if (dres != nullptr) d = load_f(dres, drt, row + c) + d;
    store_f(dx, dxt, row + c, d);
  }
}

// ---- RMSNorm fast path --------------------------------------------------------------------------
// Thread t of a block owns vectors t, t + blockDim.x, ... (NV of them) of every row: VEC = 8
// elements each (one 16-byte load of bf16, two of fp32). The per-thread sum runs over its vectors in order, then block_sum.

// One block per row. ADD: the row is a + b (x is a), rounded to T, stored to sum.
template <class T, class W, int NV, bool ADD>
__global__ void __launch_bounds__(1024) rms_fwd_vec_kernel(T* y, float* rstd, const T* x, const T* b, T* sum,
                                                            const W* w, int64_t C, float eps) {
  constexpr int VEC = 8;  // 16 bytes of bf16, 32 of fp32
  __shared__ float red[32];
  const int64_t row = int64_t(blockIdx.x) * C;
  const int nvec = int(C / VEC);
  float v[NV][VEC];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) {
      if constexpr (ADD) {
        float o[VEC];
        load_n_rw<VEC>(x + row + j * VEC, v[k]);
        load_n<VEC>(b + row + j * VEC, o);
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[k][e] += o[e];
        round_n<VEC, T>(v[k]);
        store_n<VEC>(sum + row + j * VEC, v[k]);
      } else {
        load_n<VEC>(x + row + j * VEC, v[k]);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) ss += v[k][e] * v[k][e];
    }
  }
  const float r = 1.0f / sqrtf(block_sum(ss, red) / float(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) {
      float wv[VEC];
      load_n<VEC>(w + j * VEC, wv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[k][e] = v[k][e] * r * wv[e];
      store_n<VEC>(y + row + j * VEC, v[k]);
    }
  }
}

// Block = chunk of rows [n0, n1). dx per row (ADD: + dres), dw partial for the chunk in pdw.
template <class T, class W, int NV, bool ADD>
__global__ void __launch_bounds__(1024) rms_bwd_vec_kernel(T* dx, float* pdw, const T* dy, const T* x, const W* w,
                                                            const float* rstd, const T* dres, int64_t N, int64_t C,
                                                            int64_t rows_per_chunk) {
  constexpr int VEC = 8;  // 16 bytes of bf16, 32 of fp32
  __shared__ float red[32];
  const int nvec = int(C / VEC);
  const int64_t n0 = int64_t(blockIdx.x) * rows_per_chunk;
  const int64_t n1 = min(N, n0 + rows_per_chunk);
  float wv[NV][VEC], acc[NV][VEC];
  constexpr int PK = kWords<T, VEC>;
  uint4 xp[NV][PK], dyp[NV][PK];  // the next row, packed
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[k][e] = 0.0f;
    if (j < nvec) {
      load_n<VEC>(w + j * VEC, wv[k]);
      load_raw<VEC>(x + n0 * C + j * VEC, xp[k]);
      load_raw<VEC>(dy + n0 * C + j * VEC, dyp[k]);
    }
  }
  for (int64_t n = n0; n < n1; ++n) {
    float xv[NV][VEC], dyv[NV][VEC];
    float gx = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < nvec) {
        unpack_raw<VEC>(xp[k], xv[k], x);
        unpack_raw<VEC>(dyp[k], dyv[k], dy);
        if (n + 1 < n1) {  // prefetch the next row while this one reduces
          load_raw<VEC>(x + (n + 1) * C + j * VEC, xp[k]);
          load_raw<VEC>(dy + (n + 1) * C + j * VEC, dyp[k]);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) gx += dyv[k][e] * wv[k][e] * xv[k][e];
      }
    }
    const float r = rstd[n];
    const float coef = r * r * r * block_sum(gx, red) / float(C);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < nvec) {
        float d[VEC], res[VEC];
        if constexpr (ADD) load_n_rw<VEC>(dres + n * C + j * VEC, res);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float g = dyv[k][e] * wv[k][e];
          d[e] = r * g - xv[k][e] * coef;
          if constexpr (ADD) d[e] = res[e] + d[e];
          acc[k][e] += dyv[k][e] * (xv[k][e] * r);
        }
        store_n<VEC>(dx + n * C + j * VEC, d);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) store_n<VEC>(pdw + int64_t(blockIdx.x) * C + j * VEC, acc[k]);
  }
}

__global__ void layernorm_fwd_kernel(void* y, float* mean, float* rstd, const void* x, DType xt, const void* w,
                                     DType wt, const void* b, DType bt, int64_t C, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += load_f(x, xt, row + c);
  const float mu = block_sum(s, red) / float(C);
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float d = load_f(x, xt, row + c) - mu;
    ss += d * d;
  }
  const float r = 1.0f / sqrtf(block_sum(ss, red) / float(C) + eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = (load_f(x, xt, row + c) - mu) * r * load_f(w, wt, c);
    if (b != nullptr) v += load_f(b, bt, c);
    store_f(y, xt, row + c, v);
  }
}

__global__ void layernorm_bwd_dx_kernel(void* dx, DType dxt, const void* dy, DType dyt, const void* x, DType xt,
                                        const void* w, DType wt, const float* mean, const float* rstd, int64_t C) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x * C;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float g = load_f(dy, dyt, row + c) * load_f(w, wt, c);
    sg += g;
    sgx += g * (load_f(x, xt, row + c) - mu) * r;
  }
  const float mean_g = block_sum(sg, red) / float(C);
  const float mean_gx = block_sum(sgx, red) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float g = load_f(dy, dyt, row + c) * load_f(w, wt, c);
    float xh = (load_f(x, xt, row + c) - mu) * r;
    store_f(dx, dxt, row + c, r * (g - mean_g - xh * mean_gx));
  }
}

// Pass 1 of the weight gradients: block (column tile, chunk) sums rows
// [chunk*rows_per_chunk, ...) of dy * xh (and of dy when pdb is given) for its columns.
// mean == nullptr selects RMSNorm (xh = x * r).
__global__ void norm_wgrad_partial_kernel(float* pdw, float* pdb, const void* dy, DType dyt, const void* x, DType xt,
                                          const float* mean, const float* rstd, int64_t N, int64_t C,
                                          int64_t rows_per_chunk) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t n0 = blockIdx.y * rows_per_chunk;
  const int64_t n1 = min(N, n0 + rows_per_chunk);
  float sdw = 0.0f, sdb = 0.0f;
  for (int64_t n = n0; n < n1; ++n) {
    float g = load_f(dy, dyt, n * C + c);
    float xv = load_f(x, xt, n * C + c);
    float xh = (mean != nullptr ? xv - mean[n] : xv) * rstd[n];
    sdw += g * xh;
    sdb += g;
  }
  pdw[blockIdx.y * C + c] = sdw;
  if (pdb != nullptr) pdb[blockIdx.y * C + c] = sdb;
}

// Pass 2: grad[c] += sum over chunks (in order) of partial[chunk, c]. Block: 32 columns (lanes) x
// kCombineWarps warps; warp w sums chunks w, w + kCombineWarps, ... in order, then lane c of warp 0
// adds the warps' sums in warp order.
constexpr int kCombineWarps = 16;
__global__ void __launch_bounds__(kCombineWarps * 32) norm_wgrad_combine_kernel(void* grad, DType gt,
                                                                                const float* partial, int64_t chunks,
                                                                                int64_t C) {
  __shared__ float part[kCombineWarps][33];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  const int64_t c = blockIdx.x * int64_t(32) + lane;
  float s = 0.0f;
  if (c < C)
    for (int64_t k = wid; k < chunks; k += kCombineWarps) s += partial[k * C + c];
  part[wid][lane] = s;
  __syncthreads();
  if (wid == 0 && c < C) {
    float t = 0.0f;
    for (int w = 0; w < kCombineWarps; ++w) t += part[w][lane];
    store_f(grad, gt, c, load_f(grad, gt, c) + t);
  }
}

void check_float_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined())
      HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ",
                  t->desc());
}

// grad (C) += the sum over chunks, in order, of partial (chunks, C).
void combine_partials(Exec& ex, Tensor& grad, const Tensor& partial, int64_t chunks) {
  const int64_t C = grad.numel();
  norm_wgrad_combine_kernel<<<unsigned((C + 31) / 32), kCombineWarps * 32, 0, stream_of(ex)>>>(
      grad.raw(), grad.dtype(), partial.data<float>(), chunks, C);
  check_launch("norm_wgrad_combine_kernel");
}

// dw += sum_n dy * xh and, when db is defined, db += sum_n dy.
void norm_wgrad(Exec& ex, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const float* mean,
                const Tensor& rstd) {
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0 || C == 0) return;
  const int64_t chunks = N < kMaxChunks ? N : kMaxChunks;
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const bool with_db = db.defined();
  Tensor pdw = Tensor::empty({chunks, C}, DType::F32, Device::CUDA);                     // (chunks, C)
  Tensor pdb = with_db ? Tensor::empty({chunks, C}, DType::F32, Device::CUDA) : Tensor();  // (chunks, C)
  cudaStream_t s = stream_of(ex);
  const unsigned col_blocks = unsigned((C + kColThreads - 1) / kColThreads);
  norm_wgrad_partial_kernel<<<dim3(col_blocks, unsigned(chunks)), kColThreads, 0, s>>>(
      pdw.data<float>(), with_db ? pdb.data<float>() : nullptr, dy.raw(), dy.dtype(), x.raw(), x.dtype(), mean,
      rstd.data<float>(), N, C, rows_per_chunk);
  check_launch("norm_wgrad_partial_kernel");
  combine_partials(ex, dw, pdw, chunks);
  if (with_db) combine_partials(ex, db, pdb, chunks);
}

// ---- RMSNorm launchers --------------------------------------------------------------------------
constexpr int kMaxVecThreads = 256;   // the fast path's block size target
// Backward row chunks, set by N alone (measured on H100: 512 beat ~1000 at N 8192, C 2048).
constexpr int64_t kMaxRmsChunks = 512;

// Vectors per thread NV (1, 2, 4 or 8) and block size for nvec vectors per row; false when the
// row does not fit the fast path.
bool vec_shape(int64_t nvec, int& nv, int& threads) {
  for (nv = 1; nv <= 8; nv *= 2) {
    const int64_t t = (nvec + nv - 1) / nv;
    if (t <= kMaxVecThreads || (nv == 8 && t <= 1024)) {
      threads = int((t + 31) / 32 * 32);
      return true;
    }
  }
  return false;
}

// The fast path applies: every activation tensor of the row dtype T, w fp32/bf16, aligned rows.
bool vec_ok(const Tensor& x, std::initializer_list<const Tensor*> acts, const Tensor& w) {
  const int64_t C = x.size(1);
  if (C % 8 != 0 || !aligned16(w.raw())) return false;
  for (const Tensor* t : acts)
    if (t->dtype() != x.dtype() || !aligned16(t->raw())) return false;
  return aligned16(x.raw());
}

// Calls f(T{}, W{}) with the storage types of x (activations) and w.
template <class F>
void with_types(DType xt, DType wt, F&& f) {
  if (xt == DType::BF16) {
    if (wt == DType::BF16) f(__nv_bfloat16{}, __nv_bfloat16{}); else f(__nv_bfloat16{}, float{});
  } else {
    if (wt == DType::BF16) f(float{}, __nv_bfloat16{}); else f(float{}, float{});
  }
}

template <class F>
void with_nv(int nv, F&& f) {
  switch (nv) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// y = rmsnorm(x) or, with b, y = rmsnorm(sum = round(x + b)).
void rms_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor* b, Tensor* sum, const Tensor& w,
             double eps) {
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  cudaStream_t s = stream_of(ex);
  const bool add = b != nullptr;
  int nv = 0, threads = 0;
  const bool vec = (add ? vec_ok(x, {&y, b, sum}, w) : vec_ok(x, {&y}, w)) &&
                   vec_shape(C / 8, nv, threads);
  if (!vec) {
    rmsnorm_fwd_kernel<<<unsigned(N), kRowThreads, 0, s>>>(y.raw(), rstd.data<float>(), x.raw(), x.dtype(), w.raw(),
                                                           w.dtype(), C, float(eps), add ? b->raw() : nullptr,
                                                           add ? sum->raw() : nullptr);
    check_launch("rmsnorm_fwd_kernel");
    return;
  }
  with_types(x.dtype(), w.dtype(), [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    with_nv(nv, [&](auto nvc) {
      constexpr int NV = decltype(nvc)::value;
      if (add)
        rms_fwd_vec_kernel<T, W, NV, true><<<unsigned(N), threads, 0, s>>>(
            static_cast<T*>(y.raw()), rstd.data<float>(), static_cast<const T*>(x.raw()),
            static_cast<const T*>(b->raw()), static_cast<T*>(sum->raw()), static_cast<const W*>(w.raw()), C,
            float(eps));
      else
        rms_fwd_vec_kernel<T, W, NV, false><<<unsigned(N), threads, 0, s>>>(
            static_cast<T*>(y.raw()), rstd.data<float>(), static_cast<const T*>(x.raw()), nullptr, nullptr,
            static_cast<const W*>(w.raw()), C, float(eps));
    });
  });
  check_launch("rms_fwd_vec_kernel");
}

// dx = rmsnorm input gradient (+ dres); dw += sum_n dy * x * rstd.
void rms_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
             const Tensor* dres) {
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  cudaStream_t s = stream_of(ex);
  const bool add = dres != nullptr;
  int nv = 0, threads = 0;
  const bool vec = (add ? vec_ok(x, {&dx, &dy, dres}, w) : vec_ok(x, {&dx, &dy}, w)) &&
                   vec_shape(C / 8, nv, threads);
  if (!vec) {
    rmsnorm_bwd_dx_kernel<<<unsigned(N), kRowThreads, 0, s>>>(
        dx.raw(), dx.dtype(), dy.raw(), dy.dtype(), x.raw(), x.dtype(), w.raw(), w.dtype(), rstd.data<float>(), C,
        add ? dres->raw() : nullptr, add ? dres->dtype() : DType::F32);
    check_launch("rmsnorm_bwd_dx_kernel");
    Tensor no_db;
    norm_wgrad(ex, dw, no_db, dy, x, nullptr, rstd);
    return;
  }
  const int64_t rows_per_chunk = (N + kMaxRmsChunks - 1) / kMaxRmsChunks;
  const int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  Tensor pdw = Tensor::empty({chunks, C}, DType::F32, Device::CUDA);  // (chunks, C)
  with_types(x.dtype(), w.dtype(), [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    with_nv(nv, [&](auto nvc) {
      constexpr int NV = decltype(nvc)::value;
      if (add)
        rms_bwd_vec_kernel<T, W, NV, true><<<unsigned(chunks), threads, 0, s>>>(
            static_cast<T*>(dx.raw()), pdw.data<float>(), static_cast<const T*>(dy.raw()),
            static_cast<const T*>(x.raw()), static_cast<const W*>(w.raw()), rstd.data<float>(),
            static_cast<const T*>(dres->raw()), N, C, rows_per_chunk);
      else
        rms_bwd_vec_kernel<T, W, NV, false><<<unsigned(chunks), threads, 0, s>>>(
            static_cast<T*>(dx.raw()), pdw.data<float>(), static_cast<const T*>(dy.raw()),
            static_cast<const T*>(x.raw()), static_cast<const W*>(w.raw()), rstd.data<float>(), nullptr, N, C,
            rows_per_chunk);
    });
  });
  check_launch("rms_bwd_vec_kernel");
  combine_partials(ex, dw, pdw, chunks);
}

}  // namespace

void rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  check_float_dtypes("rmsnorm_fwd", {&y, &x, &w});
  rms_fwd(ex, y, rstd, x, nullptr, nullptr, w, eps);
}

void rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd) {
  check_float_dtypes("rmsnorm_bwd", {&dx, &dw, &dy, &x, &w});
  rms_bwd(ex, dx, dw, dy, x, w, rstd, nullptr);
}

void add_rmsnorm_fwd(Exec& ex, Tensor& sum, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b,
                     const Tensor& w, double eps) {
  check_float_dtypes("add_rmsnorm_fwd", {&sum, &y, &a, &b, &w});
  rms_fwd(ex, y, rstd, a, &b, &sum, w, eps);
}

void rmsnorm_bwd_add(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dres) {
  check_float_dtypes("rmsnorm_bwd_add", {&dx, &dw, &dy, &x, &w, &dres});
  rms_bwd(ex, dx, dw, dy, x, w, rstd, &dres);
}

void layernorm_fwd(Exec& ex, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                   const Tensor& b, double eps) {
  check_float_dtypes("layernorm_fwd", {&y, &x, &w, &b});
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  layernorm_fwd_kernel<<<unsigned(N), kRowThreads, 0, stream_of(ex)>>>(
      y.raw(), mean.data<float>(), rstd.data<float>(), x.raw(), x.dtype(), w.raw(), w.dtype(),
      b.defined() ? b.raw() : nullptr, b.defined() ? b.dtype() : DType::F32, C, float(eps));
  check_launch("layernorm_fwd_kernel");
}

void layernorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& mean, const Tensor& rstd) {
  check_float_dtypes("layernorm_bwd", {&dx, &dw, &db, &dy, &x, &w});
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  layernorm_bwd_dx_kernel<<<unsigned(N), kRowThreads, 0, stream_of(ex)>>>(
      dx.raw(), dx.dtype(), dy.raw(), dy.dtype(), x.raw(), x.dtype(), w.raw(), w.dtype(), mean.data<float>(),
      rstd.data<float>(), C);
  check_launch("layernorm_bwd_dx_kernel");
  norm_wgrad(ex, dw, db, dy, x, mean.data<float>(), rstd);
}

}  // namespace hytra::cuda
