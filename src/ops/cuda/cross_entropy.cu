// LM head + vocabulary cross-entropy (ops.h "LM head + vocabulary cross-entropy").
// The logits are never stored whole: for each vocabulary chunk [v0, v0 + vc), a cuBLASLt GEMM
// writes logits = x @ w[v0:v0+vc]^T into an fp32 scratch [N, vc], then
//   forward:  one block per row updates the online log-sum-exp (running max m, running sum l,
//             chunks in order) and picks the label's logit; at the end lse = m + log l and
//             loss = lse - logit[label] (0 for a label < 0);
//   backward: dlogits = (exp(logit - lse) - onehot(label)) * dloss (0 for ignored rows), stored in
//             x's dtype, then dx (+)= dlogits @ w_chunk and dw_chunk += dlogits^T @ x by GEMMs.
// dx accumulates over chunks in fp32 (a scratch when dx is bf16, copied at the end).
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void ce_chunk_stats_kernel(float* run_max, float* run_sum, float* target, const float* logits,
                                      const int32_t* labels, int64_t v0, int64_t vc, bool first) {
  __shared__ float red[32];
  const int64_t n = blockIdx.x;
  const float* row = logits + n * vc;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vc; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, red);
  const float m_old = first ? -INFINITY : run_max[n];
  const float m_new = fmaxf(m_old, mx);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < vc; j += blockDim.x) s += expf(row[j] - m_new);
  s = block_sum(s, red);
  if (threadIdx.x == 0) {
    const float l_old = first ? 0.0f : run_sum[n] * expf(m_old - m_new);
    run_max[n] = m_new;
    run_sum[n] = l_old + s;
    if (first) target[n] = NAN;  // stays NaN for a label >= V
    const int64_t label = labels[n];
    if (label >= v0 && label < v0 + vc) target[n] = row[label - v0];
  }
}

__global__ void ce_finalize_kernel(float* loss, float* lse, const float* run_max, const float* run_sum,
                                   const float* target, const int32_t* labels, int64_t N) {
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x) {
    const float l = run_max[n] + logf(run_sum[n]);
    lse[n] = l;
    loss[n] = labels[n] < 0 ? 0.0f : l - target[n];
  }
}

__global__ void ce_grad_kernel(void* dlogits, DType dt, const float* logits, const int32_t* labels, const float* lse,
                               const float* dloss, int64_t v0, int64_t N, int64_t vc) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * vc; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / vc, j = e % vc;
    const int64_t label = labels[n];
    float g = 0.0f;
    if (label >= 0) {
      const float onehot = label == v0 + j ? 1.0f : 0.0f;
      g = (expf(logits[e] - lse[n]) - onehot) * dloss[n];
    }
    store_f(dlogits, dt, e, g);
  }
}

// The [N, vc] front of a flat scratch buffer.
Tensor front(const Tensor& flat, int64_t N, int64_t vc) { return flat.narrow(0, 0, N * vc).view({N, vc}); }

void check_dtypes(const char* op, const Tensor& x) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", x.desc());
}

}  // namespace

void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels,
                    int64_t vocab_chunk) {
  check_dtypes("lm_head_ce_fwd", x);
  const int64_t N = x.size(0), V = w.size(0);
  HYTRA_CHECK(V > 0, "lm_head_ce_fwd: empty vocabulary");
  if (N == 0) return;
  const int64_t chunk = vocab_chunk < V ? vocab_chunk : V;
  Tensor logits_buf = Tensor::empty({N * chunk}, DType::F32, Device::CUDA);  // (N*chunk)
  Tensor run_max = Tensor::empty({N}, DType::F32, Device::CUDA);             // (N)
  Tensor run_sum = Tensor::empty({N}, DType::F32, Device::CUDA);             // (N)
  Tensor target = Tensor::empty({N}, DType::F32, Device::CUDA);              // (N)
  cudaStream_t s = stream_of(ex);
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t vc = chunk < V - v0 ? chunk : V - v0;
    Tensor logits = front(logits_buf, N, vc);  // (N, vc)
    gemm(ex, logits, x, w.narrow(0, v0, vc), false, true, 1.0f, 0.0f);
    ce_chunk_stats_kernel<<<unsigned(N), kThreads, 0, s>>>(run_max.data<float>(), run_sum.data<float>(),
                                                           target.data<float>(), logits.data<float>(),
                                                           labels.data<int32_t>(), v0, vc, v0 == 0);
    check_launch("ce_chunk_stats_kernel");
  }
  ce_finalize_kernel<<<grid_for(N, kThreads), kThreads, 0, s>>>(loss.data<float>(), lse.data<float>(),
                                                                run_max.data<float>(), run_sum.data<float>(),
                                                                target.data<float>(), labels.data<int32_t>(), N);
  check_launch("ce_finalize_kernel");
}

void lm_head_ce_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w,
                    const Tensor& labels, const Tensor& lse, int64_t vocab_chunk) {
  check_dtypes("lm_head_ce_bwd", x);
  HYTRA_CHECK(dx.dtype() == DType::F32 || dx.dtype() == DType::BF16, "lm_head_ce_bwd on CUDA: unsupported dtype ",
              dx.desc());
  HYTRA_CHECK(dw.dtype() == x.dtype() || dw.dtype() == DType::F32, "lm_head_ce_bwd on CUDA: dw must be fp32 or ",
              dtype_name(x.dtype()), ", got ", dw.desc());
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  if (N == 0 || V == 0) return;
  const int64_t chunk = vocab_chunk < V ? vocab_chunk : V;
  Tensor logits_buf = Tensor::empty({N * chunk}, DType::F32, Device::CUDA);   // (N*chunk)
  Tensor dlogits_buf = Tensor::empty({N * chunk}, x.dtype(), Device::CUDA);   // (N*chunk)
  Tensor dx_acc = dx.dtype() == DType::F32 ? dx : Tensor::empty({N, C}, DType::F32, Device::CUDA);  // (N,C)
  cudaStream_t s = stream_of(ex);
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t vc = chunk < V - v0 ? chunk : V - v0;
    Tensor w_chunk = w.narrow(0, v0, vc);          // (vc, C)
    Tensor logits = front(logits_buf, N, vc);      // (N, vc)
    Tensor dlogits = front(dlogits_buf, N, vc);    // (N, vc)
    gemm(ex, logits, x, w_chunk, false, true, 1.0f, 0.0f);
    ce_grad_kernel<<<grid_for(N * vc, kThreads), kThreads, 0, s>>>(dlogits.raw(), dlogits.dtype(),
                                                                    logits.data<float>(), labels.data<int32_t>(),
                                                                    lse.data<float>(), dloss.data<float>(), v0, N, vc);
    check_launch("ce_grad_kernel");
    gemm(ex, dx_acc, dlogits, w_chunk, false, false, 1.0f, v0 == 0 ? 0.0f : 1.0f);
    Tensor dw_chunk = dw.narrow(0, v0, vc);  // (vc, C)
    gemm(ex, dw_chunk, dlogits, x, true, false, 1.0f, 1.0f);
  }
  if (dx_acc.raw() != dx.raw()) copy(ex, dx, dx_acc);
}

}  // namespace hytra::cuda
