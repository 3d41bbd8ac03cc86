// RMSNorm and LayerNorm, forward and backward (ops.h "norms"), statistics in fp32.
//   RMSNorm:   r = 1/sqrt(mean(x^2) + eps);  y = x * r * w
//              dx = r * g - x * r^3 * mean(g * x),  g = dy * w;          dw += sum_n dy * x * r
//   LayerNorm: mu = mean(x), r = 1/sqrt(mean((x - mu)^2) + eps), xh = (x - mu) * r, y = xh * w + b
//              dx = r * (g - mean(g) - xh * mean(g * xh));  dw += sum_n dy * xh;  db += sum_n dy
// Row kernels: one block per row, block reductions in a fixed order. Weight gradients without
// atomics: pass 1 sums a fixed number of row chunks (set by N alone) per column into fp32
// partials [chunks, C]; pass 2 adds the chunks in order to dw / db.
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColThreads = 256;
constexpr int64_t kMaxChunks = 128;

__global__ void rmsnorm_fwd_kernel(void* y, float* rstd, const void* x, DType xt, const void* w, DType wt, int64_t C,
                                   float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = load_f(x, xt, row + c);
    ss += v * v;
  }
  const float r = 1.0f / sqrtf(block_sum(ss, red) / float(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) store_f(y, xt, row + c, load_f(x, xt, row + c) * r * load_f(w, wt, c));
}

__global__ void rmsnorm_bwd_dx_kernel(void* dx, DType dxt, const void* dy, DType dyt, const void* x, DType xt,
                                      const void* w, DType wt, const float* rstd, int64_t C) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x * C;
  const float r = rstd[blockIdx.x];
  float gx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    gx += load_f(dy, dyt, row + c) * load_f(w, wt, c) * load_f(x, xt, row + c);
  const float coef = r * r * r * block_sum(gx, red) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float g = load_f(dy, dyt, row + c) * load_f(w, wt, c);
    store_f(dx, dxt, row + c, r * g - load_f(x, xt, row + c) * coef);
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

// Pass 2: grad[c] += sum over chunks (in order) of partial[chunk, c].
__global__ void norm_wgrad_combine_kernel(void* grad, DType gt, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
  store_f(grad, gt, c, load_f(grad, gt, c) + s);
}

void check_float_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined())
      HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ",
                  t->desc());
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
  norm_wgrad_combine_kernel<<<col_blocks, kColThreads, 0, s>>>(dw.raw(), dw.dtype(), pdw.data<float>(), chunks, C);
  check_launch("norm_wgrad_combine_kernel");
  if (with_db) {
    norm_wgrad_combine_kernel<<<col_blocks, kColThreads, 0, s>>>(db.raw(), db.dtype(), pdb.data<float>(), chunks, C);
    check_launch("norm_wgrad_combine_kernel");
  }
}

}  // namespace

void rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  check_float_dtypes("rmsnorm_fwd", {&y, &x, &w});
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  rmsnorm_fwd_kernel<<<unsigned(N), kRowThreads, 0, stream_of(ex)>>>(y.raw(), rstd.data<float>(), x.raw(), x.dtype(),
                                                                     w.raw(), w.dtype(), C, float(eps));
  check_launch("rmsnorm_fwd_kernel");
}

void rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd) {
  check_float_dtypes("rmsnorm_bwd", {&dx, &dw, &dy, &x, &w});
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  rmsnorm_bwd_dx_kernel<<<unsigned(N), kRowThreads, 0, stream_of(ex)>>>(
      dx.raw(), dx.dtype(), dy.raw(), dy.dtype(), x.raw(), x.dtype(), w.raw(), w.dtype(), rstd.data<float>(), C);
  check_launch("rmsnorm_bwd_dx_kernel");
  Tensor no_db;
  norm_wgrad(ex, dw, no_db, dy, x, nullptr, rstd);
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
