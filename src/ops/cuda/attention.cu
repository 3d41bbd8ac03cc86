// Causal GQA softmax attention, forward and backward (ops.h "attention"): the plain reference
// kernels, correct and deterministic, not tuned. bf16 at the head dims cuDNN takes (attention_cudnn.cpp
// cudnn_attention_supported) goes to cuDNN's fused flash attention instead when the build has cuDNN.
// q, dq (B,T,H,D); out, dout (B,T,H,Dv); k, dk (B,T,Hkv,D); v, dv (B,T,Hkv,Dv); query head h reads kv head
// h / (H/Hkv).
//   s_ij = scale * q_i . k_j (j <= i),  lse_i = log sum_j exp(s_ij),  out_i = sum_j exp(s_ij - lse_i) v_j
// Forward: one block per (query row i, head h, batch b) walks the keys in tiles of kThreads, one
// key per thread, with an online softmax (running max m, sum l) in fp32; out and m, l are rescaled
// per tile. Backward (FlashAttention-2 maths, with P rebuilt from lse):
//   delta_i = dout_i . out_i,  p_ij = exp(s_ij - lse_i),  ds_ij = p_ij (dout_i . v_j - delta_i)
//   dq_i = scale sum_j ds_ij k_j;  dk_j = scale sum_{h in group, i >= j} ds_ij q_i;  dv_j = sum p_ij dout_i
// dq: one block per query row; dk/dv: one block per (key row, kv head) looping over the query
// heads of its group. Every output row has exactly one writer, summed in a fixed order; no atomics.
#include <cmath>

#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#if defined(HYTRA_HAVE_CUDNN)
#include "ops/cuda/attention_cudnn.h"
#endif

namespace hytra::cuda {
namespace {

constexpr int kThreads = 128;

struct AttnDims {
  int64_t T, H, Hkv, D, Dv;
  // Element offset of (b, t, head, 0) in q (B,T,H,D), k (B,T,Hkv,D), out (B,T,H,Dv) and v (B,T,Hkv,Dv).
  __device__ int64_t q_row(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * D; }
  __device__ int64_t kv_row(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hkv + h) * D; }
  __device__ int64_t o_row(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * Dv; }
  __device__ int64_t v_row(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hkv + h) * Dv; }
  __device__ int64_t stat(int64_t b, int64_t h, int64_t t) const { return (b * H + h) * T + t; }  // (B,H,T)
};

// Dot product of a shared fp32 row with a global row of length D.
__device__ __forceinline__ float dot_row(const float* a, const void* p, DType t, int64_t off, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; ++d) s += a[d] * load_f(p, t, off + d);
  return s;
}

// Dynamic shared memory: q[D], o[Dv] (fp32).
__global__ void __launch_bounds__(kThreads) attention_fwd_kernel(void* out, float* lse, const void* q, const void* k,
                                                                 const void* v, DType dt, AttnDims a, float scale) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* os = smem + a.D;
  __shared__ float p[kThreads];
  __shared__ float red[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (a.H / a.Hkv);
  const int64_t qoff = a.q_row(b, i, h), ooff = a.o_row(b, i, h);
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) qs[d] = load_f(q, dt, qoff + d);
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) os[d] = 0.0f;
  __syncthreads();
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 <= i; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    const float s = j <= i ? scale * dot_row(qs, k, dt, a.kv_row(b, j, hk), a.D) : -INFINITY;
    const float m_new = fmaxf(m, block_max(s, red));  // finite: key j0 <= i is in the tile
    const float pj = j <= i ? expf(s - m_new) : 0.0f;
    p[threadIdx.x] = pj;
    const float corr = expf(m - m_new);
    l = l * corr + block_sum(pj, red);  // block_sum's barrier also publishes p
    m = m_new;
    const int64_t count = min(int64_t(kThreads), i - j0 + 1);
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
      float acc = os[d] * corr;
      for (int64_t jj = 0; jj < count; ++jj) acc += p[jj] * load_f(v, dt, a.v_row(b, j0 + jj, hk) + d);
      os[d] = acc;
    }
    __syncthreads();  // p is rewritten by the next tile
  }
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) store_f(out, dt, ooff + d, os[d] / l);
  if (threadIdx.x == 0) lse[a.stat(b, h, i)] = m + logf(l);
}

// delta (B,H,T) = rowwise dout . out; one warp per (b, t, h) row, grid-stride over rows.
__global__ void attention_delta_kernel(float* delta, const void* dout, const void* out, DType dt, AttnDims a,
                                       int64_t rows) {
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    float s = 0.0f;
    for (int64_t d = lane; d < a.Dv; d += 32) s += load_f(dout, dt, r * a.Dv + d) * load_f(out, dt, r * a.Dv + d);
    s = warp_sum(s);
    const int64_t h = r % a.H, t = (r / a.H) % a.T, b = r / (a.H * a.T);
    if (lane == 0) delta[a.stat(b, h, t)] = s;
  }
}

// Dynamic shared memory: q[D], dq[D], dout[Dv] (fp32).
__global__ void __launch_bounds__(kThreads) attention_bwd_dq_kernel(void* dq, const void* dout, const void* q,
                                                                    const void* k, const void* v, const float* lse,
                                                                    const float* delta, DType dt, AttnDims a,
                                                                    float scale) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* dqs = smem + a.D;
  float* dos = smem + 2 * a.D;
  __shared__ float ds[kThreads];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (a.H / a.Hkv);
  const int64_t qoff = a.q_row(b, i, h), ooff = a.o_row(b, i, h);
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
    qs[d] = load_f(q, dt, qoff + d);
    dqs[d] = 0.0f;
  }
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) dos[d] = load_f(dout, dt, ooff + d);
  __syncthreads();
  const float lse_i = lse[a.stat(b, h, i)], delta_i = delta[a.stat(b, h, i)];
  for (int64_t j0 = 0; j0 <= i; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    float dsj = 0.0f;
    if (j <= i) {
      const float pj = expf(scale * dot_row(qs, k, dt, a.kv_row(b, j, hk), a.D) - lse_i);
      dsj = pj * (dot_row(dos, v, dt, a.v_row(b, j, hk), a.Dv) - delta_i);
    }
    ds[threadIdx.x] = dsj;
    __syncthreads();
    const int64_t count = min(int64_t(kThreads), i - j0 + 1);
    for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
      float acc = dqs[d];
      for (int64_t jj = 0; jj < count; ++jj) acc += ds[jj] * load_f(k, dt, a.kv_row(b, j0 + jj, hk) + d);
      dqs[d] = acc;
    }
    __syncthreads();
  }
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) store_f(dq, dt, qoff + d, scale * dqs[d]);
}

// Dynamic shared memory: k[D], dk[D], v[Dv], dv[Dv] (fp32).
__global__ void __launch_bounds__(kThreads) attention_bwd_dkv_kernel(void* dk, void* dv, const void* dout,
                                                                     const void* q, const void* k, const void* v,
                                                                     const float* lse, const float* delta, DType dt,
                                                                     AttnDims a, float scale) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* dks = smem + a.D;
  float* vs = smem + 2 * a.D;
  float* dvs = vs + a.Dv;
  __shared__ float p[kThreads];
  __shared__ float ds[kThreads];
  const int64_t j = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int64_t group = a.H / a.Hkv;
  const int64_t koff = a.kv_row(b, j, hk), voff = a.v_row(b, j, hk);
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
    ks[d] = load_f(k, dt, koff + d);
    dks[d] = 0.0f;
  }
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
    vs[d] = load_f(v, dt, voff + d);
    dvs[d] = 0.0f;
  }
  __syncthreads();
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t i0 = j; i0 < a.T; i0 += kThreads) {
      const int64_t i = i0 + threadIdx.x;
      float pi = 0.0f, dsi = 0.0f;
      if (i < a.T) {
        pi = expf(scale * dot_row(ks, q, dt, a.q_row(b, i, h), a.D) - lse[a.stat(b, h, i)]);
        dsi = pi * (dot_row(vs, dout, dt, a.o_row(b, i, h), a.Dv) - delta[a.stat(b, h, i)]);
      }
      p[threadIdx.x] = pi;
      ds[threadIdx.x] = dsi;
      __syncthreads();
      const int64_t count = min(int64_t(kThreads), a.T - i0);
      for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
        float acc = dks[d];
        for (int64_t ii = 0; ii < count; ++ii) acc += ds[ii] * load_f(q, dt, a.q_row(b, i0 + ii, h) + d);
        dks[d] = acc;
      }
      for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
        float acc = dvs[d];
        for (int64_t ii = 0; ii < count; ++ii) acc += p[ii] * load_f(dout, dt, a.o_row(b, i0 + ii, h) + d);
        dvs[d] = acc;
      }
      __syncthreads();
    }
  }
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) store_f(dk, dt, koff + d, scale * dks[d]);
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) store_f(dv, dt, voff + d, dvs[d]);
}

AttnDims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return AttnDims{q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

// Grid (T, heads, B) for one block per row; checks the limits and the shared-memory size (`floats` a block).
dim3 row_grid(const char* op, int64_t B, int64_t T, int64_t heads, int64_t floats) {
  HYTRA_CHECK(T < (int64_t(1) << 31) && heads <= 65535 && B <= 65535, op, " on CUDA: grid too large (B=", B, ", T=", T,
              ", heads=", heads, ")");
  HYTRA_CHECK(size_t(floats) * sizeof(float) <= 40 * 1024, op, " on CUDA: head dims too large");
  return dim3(unsigned(T), unsigned(heads), unsigned(B));
}

}  // namespace

void attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                   double softmax_scale) {
#if defined(HYTRA_HAVE_CUDNN)
  if (cudnn_attention_fwd_supported(out, lse, q, k, v)) {  // cuDNN's fused flash attention
    cudnn_attention_fwd(ex, out, lse, q, k, v, softmax_scale);
    return;
  }
#endif
  HYTRA_CHECK(q.dtype() == DType::F32 || q.dtype() == DType::BF16, "attention_fwd on CUDA: unsupported dtype ",
              q.desc());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Dv = v.size(3);
  if (B * T * H == 0) return;
  const dim3 grid = row_grid("attention_fwd", B, T, H, D + Dv);
  attention_fwd_kernel<<<grid, kThreads, (D + Dv) * sizeof(float), stream_of(ex)>>>(
      out.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(), q.dtype(), dims_of(q, k, v), float(softmax_scale));
  check_launch("attention_fwd_kernel");
}

void attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double softmax_scale) {
#if defined(HYTRA_HAVE_CUDNN)
  if (cudnn_attention_bwd_supported(dq, dk, dv, dout, q, k, v, out, lse)) {
    cudnn_attention_bwd(ex, dq, dk, dv, dout, q, k, v, out, lse, softmax_scale);
    return;
  }
#endif
  const DType dt = q.dtype();
  HYTRA_CHECK(dt == DType::F32 || dt == DType::BF16, "attention_bwd on CUDA: unsupported dtype ", q.desc());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dq, &dk, &dv, &dout})
    HYTRA_CHECK(t->dtype() == dt, "attention_bwd on CUDA: gradients must have q's dtype ", dtype_name(dt), ", got ",
                t->desc());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  if (B * T * H == 0) return;
  const AttnDims a = dims_of(q, k, v);
  const float scale = float(softmax_scale);
  cudaStream_t s = stream_of(ex);
  Tensor delta = Tensor::empty({B, H, T}, DType::F32, Device::CUDA);  // (B,H,T)
  const int64_t rows = B * T * H;
  attention_delta_kernel<<<grid_for(rows * 32, 256), 256, 0, s>>>(delta.data<float>(), dout.raw(), out.raw(), dt, a,
                                                                  rows);
  check_launch("attention_delta_kernel");
  attention_bwd_dq_kernel<<<row_grid("attention_bwd", B, T, H, 2 * D + Dv), kThreads, (2 * D + Dv) * sizeof(float),
                            s>>>(dq.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), lse.data<float>(),
                                 delta.data<float>(), dt, a, scale);
  check_launch("attention_bwd_dq_kernel");
  attention_bwd_dkv_kernel<<<row_grid("attention_bwd", B, T, Hkv, 2 * (D + Dv)), kThreads, 2 * (D + Dv) * sizeof(float),
                             s>>>(dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), lse.data<float>(),
                                  delta.data<float>(), dt, a, scale);
  check_launch("attention_bwd_dkv_kernel");
}

}  // namespace hytra::cuda
