// LM head + vocabulary cross-entropy (ops.h "LM head + vocabulary cross-entropy").
// The logits are never stored whole: for each vocabulary chunk [v0, v0 + vc), a cuBLASLt GEMM
// writes logits = x @ w[v0:v0+vc]^T into a scratch [N, vc] in x's dtype (bf16 runs keep bf16 logits,
// as Megatron's output layer does; all softmax math is fp32), then
//   forward:  one block per row updates the online log-sum-exp (running max m, running sum l,
//             chunks in order; one read of the chunk) and picks the label's logit; at the end lse = m + log l and
//             loss = lse - logit[label] (0 for a label < 0);
//   backward: dlogits = (exp(logit - lse) - onehot(label)) * dloss (0 for ignored rows), written over
//             the logits, then dx (+)= dlogits @ w_chunk and dw_chunk += dlogits^T @ x by GEMMs.
// dx accumulates over chunks in fp32 (a scratch when dx is bf16, copied at the end).
// fwd_bwd (dloss known up front): token chunks [n0, n0 + nc) over the whole vocabulary instead: one
// GEMM writes the chunk's logits [nc, V], the stats kernel (one "chunk" of width V) and the
// finalize give loss and lse, the grad kernel turns the logits into dlogits in place, then
// dx rows = dlogits @ w (K = V inside one GEMM, no accumulation pass) and dw += dlogits^T @ x rows.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

// Online log-sum-exp state (m, l): l = sum exp(v - m) over the values seen; l == 0 means none.
__device__ __forceinline__ void lse_push(float& m, float& l, float v) {
  if (v > m) {
    l = l * expf(m - v) + 1.0f;  // l == 0 when m == -inf: stays exact
    m = v;
  } else {
    l += expf(v - m);
  }
}

__device__ __forceinline__ void lse_merge(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  const float a = l == 0.0f ? 0.0f : l * expf(m - mn);
  const float b = l2 == 0.0f ? 0.0f : l2 * expf(m2 - mn);
  m = mn;
  l = a + b;
}

// One block per row: a single pass over the chunk's logits (16-byte loads when vc is a multiple of
// the vector width) keeps a per-thread online (max, sum), merged over the warp by a fixed shuffle
// tree and over the warps in warp order, then into the running state of the previous chunks.
template <class T>
__global__ void ce_chunk_stats_kernel(float* run_max, float* run_sum, float* target, const T* logits,
                                      const int32_t* labels, int64_t v0, int64_t vc, bool first) {
  __shared__ float red_m[32], red_l[32];
  constexpr int K = kVec<T>;
  const int64_t n = blockIdx.x;
  const T* row = logits + n * vc;
  float m = -INFINITY, l = 0.0f;
  if (vc % K == 0) {
    for (int64_t j = threadIdx.x; j < vc / K; j += blockDim.x) {
      float v[K];
      load_n<K>(row + j * K, v);
#pragma unroll
      for (int k = 0; k < K; ++k) lse_push(m, l, v[k]);
    }
  } else {
    for (int64_t j = threadIdx.x; j < vc; j += blockDim.x) lse_push(m, l, float(row[j]));
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    lse_merge(m, l, m2, l2);
  }
  if (threadIdx.x % 32 == 0) {
    red_m[threadIdx.x / 32] = m;
    red_l[threadIdx.x / 32] = l;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = red_m[0], bl = red_l[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) lse_merge(bm, bl, red_m[w], red_l[w]);
    if (!first) lse_merge(bm, bl, run_max[n], run_sum[n]);
    run_max[n] = bm;
    run_sum[n] = bl;
    if (first) target[n] = NAN;  // stays NaN for a label >= V
    const int64_t label = labels[n];
    if (label >= v0 && label < v0 + vc) target[n] = float(row[label - v0]);
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

// grid (N, column blocks): a thread turns kVec<T> consecutive logits of row blockIdx.x (16 bytes;
// vc a multiple of kVec<T>) or one logit into dlogits, in place (each element read, then written,
// by the same thread).
template <class T, bool VEC>
__global__ void ce_grad_kernel(T* z, const int32_t* labels, const float* lse, const float* dloss, int64_t v0,
                               int64_t vc) {
  const int64_t n = blockIdx.x;
  const int64_t label = labels[n];
  const float l = lse[n], d = label >= 0 ? dloss[n] : 0.0f;
  constexpr int K = VEC ? kVec<T> : 1;
  const int64_t j = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * K;
  if (j >= vc) return;
  float v[K];
  if constexpr (VEC)
    load_n_rw<K>(z + n * vc + j, v);  // not the read-only path: this kernel writes z
  else
    v[0] = float(z[n * vc + j]);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float onehot = label == v0 + j + k ? 1.0f : 0.0f;
    v[k] = label >= 0 ? (expf(v[k] - l) - onehot) * d : 0.0f;
  }
  store_v<K>(z + n * vc + j, v);
}

// The [N, vc] front of a flat scratch buffer.
Tensor front(const Tensor& flat, int64_t N, int64_t vc) { return flat.narrow(0, 0, N * vc).view({N, vc}); }

void check_dtypes(const char* op, const Tensor& x) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", x.desc());
}

// The logits (rows, vc) become dlogits in place; labels, lse, dloss point at the rows.
void launch_grad(cudaStream_t s, Tensor& z, const int32_t* labels, const float* lse, const float* dloss,
                 int64_t v0) {
  const int64_t rows = z.size(0), vc = z.size(1);
  auto launch = [&](auto t) {
    using T = decltype(t);
    constexpr int K = kVec<T>;
    const bool vec = vc % K == 0;
    const dim3 grid{unsigned(rows), unsigned((vc / (vec ? K : 1) + kThreads - 1) / kThreads)};
    T* zp = static_cast<T*>(z.raw());
    if (vec)
      ce_grad_kernel<T, true><<<grid, kThreads, 0, s>>>(zp, labels, lse, dloss, v0, vc);
    else
      ce_grad_kernel<T, false><<<grid, kThreads, 0, s>>>(zp, labels, lse, dloss, v0, vc);
  };
  if (z.dtype() == DType::BF16)
    launch(__nv_bfloat16{});
  else
    launch(float{});
  check_launch("ce_grad_kernel");
}

// The chunk statistics over logits (rows, vc) in their dtype.
void launch_stats(cudaStream_t s, Tensor& run_max, Tensor& run_sum, Tensor& target, const Tensor& logits,
                  const int32_t* labels, int64_t v0, bool first) {
  const int64_t rows = logits.size(0), vc = logits.size(1);
  auto launch = [&](auto t) {
    using T = decltype(t);
    ce_chunk_stats_kernel<T><<<unsigned(rows), kThreads, 0, s>>>(run_max.data<float>(), run_sum.data<float>(),
                                                                 target.data<float>(), logits.data<T>(), labels, v0,
                                                                 vc, first);
  };
  if (logits.dtype() == DType::BF16)
    launch(__nv_bfloat16{});
  else
    launch(float{});
  check_launch("ce_chunk_stats_kernel");
}

}  // namespace

void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels,
                    int64_t vocab_chunk) {
  check_dtypes("lm_head_ce_fwd", x);
  const int64_t N = x.size(0), V = w.size(0);
  HYTRA_CHECK(V > 0, "lm_head_ce_fwd: empty vocabulary");
  if (N == 0) return;
  const int64_t chunk = vocab_chunk < V ? vocab_chunk : V;
  Tensor logits_buf = Tensor::empty({N * chunk}, x.dtype(), Device::CUDA);  // (N*chunk)
  Tensor run_max = Tensor::empty({N}, DType::F32, Device::CUDA);            // (N)
  Tensor run_sum = Tensor::empty({N}, DType::F32, Device::CUDA);            // (N)
  Tensor target = Tensor::empty({N}, DType::F32, Device::CUDA);             // (N)
  cudaStream_t s = stream_of(ex);
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t vc = chunk < V - v0 ? chunk : V - v0;
    Tensor logits = front(logits_buf, N, vc);  // (N, vc)
    gemm(ex, logits, x, w.narrow(0, v0, vc), false, true, 1.0f, 0.0f);
    launch_stats(s, run_max, run_sum, target, logits, labels.data<int32_t>(), v0, v0 == 0);
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
  Tensor z_buf = Tensor::empty({N * chunk}, x.dtype(), Device::CUDA);  // (N*chunk): logits, then dlogits
  Tensor dx_acc = dx.dtype() == DType::F32 ? dx : Tensor::empty({N, C}, DType::F32, Device::CUDA);  // (N,C)
  cudaStream_t s = stream_of(ex);
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t vc = chunk < V - v0 ? chunk : V - v0;
    Tensor w_chunk = w.narrow(0, v0, vc);  // (vc, C)
    Tensor z = front(z_buf, N, vc);        // (N, vc)
    gemm(ex, z, x, w_chunk, false, true, 1.0f, 0.0f);
    launch_grad(s, z, labels.data<int32_t>(), lse.data<float>(), dloss.data<float>(), v0);
    gemm(ex, dx_acc, z, w_chunk, false, false, 1.0f, v0 == 0 ? 0.0f : 1.0f);
    Tensor dw_chunk = dw.narrow(0, v0, vc);  // (vc, C)
    gemm(ex, dw_chunk, z, x, true, false, 1.0f, 1.0f);
  }
  if (dx_acc.raw() != dx.raw()) copy(ex, dx, dx_acc);
}

void lm_head_ce_fwd_bwd(Exec& ex, Tensor& loss, Tensor& dx, Tensor& dw, const Tensor& x, const Tensor& w,
                        const Tensor& labels, const Tensor& dloss, int64_t token_chunk) {
  check_dtypes("lm_head_ce_fwd_bwd", x);
  HYTRA_CHECK(dw.dtype() == x.dtype() || dw.dtype() == DType::F32, "lm_head_ce_fwd_bwd on CUDA: dw must be fp32 or ",
              dtype_name(x.dtype()), ", got ", dw.desc());
  const int64_t N = x.size(0), V = w.size(0);
  HYTRA_CHECK(V > 0, "lm_head_ce_fwd_bwd: empty vocabulary");
  if (N == 0) return;
  const int64_t chunk = token_chunk < N ? token_chunk : N;
  Tensor z_buf = Tensor::empty({chunk * V}, x.dtype(), Device::CUDA);  // (chunk*V): logits, then dlogits
  Tensor run_max = Tensor::empty({chunk}, DType::F32, Device::CUDA);   // (chunk)
  Tensor run_sum = Tensor::empty({chunk}, DType::F32, Device::CUDA);   // (chunk)
  Tensor target = Tensor::empty({chunk}, DType::F32, Device::CUDA);    // (chunk)
  Tensor lse = Tensor::empty({chunk}, DType::F32, Device::CUDA);       // (chunk)
  cudaStream_t s = stream_of(ex);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nc = chunk < N - n0 ? chunk : N - n0;
    const Tensor xc = x.narrow(0, n0, nc);  // (nc, C)
    Tensor z = front(z_buf, nc, V);         // (nc, V)
    const int32_t* lab = labels.data<int32_t>() + n0;
    gemm(ex, z, xc, w, false, true, 1.0f, 0.0f);
    launch_stats(s, run_max, run_sum, target, z, lab, 0, true);
    ce_finalize_kernel<<<grid_for(nc, kThreads), kThreads, 0, s>>>(loss.data<float>() + n0, lse.data<float>(),
                                                                   run_max.data<float>(), run_sum.data<float>(),
                                                                   target.data<float>(), lab, nc);
    check_launch("ce_finalize_kernel");
    launch_grad(s, z, lab, lse.data<float>(), dloss.data<float>() + n0, 0);
    Tensor dxc = dx.narrow(0, n0, nc);  // (nc, C)
    gemm(ex, dxc, z, w, false, false, 1.0f, 0.0f);
    gemm(ex, dw, z, xc, true, false, 1.0f, 1.0f);
  }
}

}  // namespace hytra::cuda
