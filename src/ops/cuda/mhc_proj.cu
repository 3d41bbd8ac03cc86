// The mHC mapping projection on CUDA (ops.def mhc_proj_fwd / mhc_proj_bwd): tall, skinny fp32 GEMMs between the
// streams x (N, D = nC, bf16 or fp32, read as stored: no fp32 copy) and the mapping weight w (P = n^2 + 2n rows of
// D, fp32), P <= 288 (n <= 16).
//   forward  proj (N,P) = x w^T: a block takes 64 tokens and one of kSplit parts of D (x and w chunks of 32
//            columns staged in shared memory, each thread 4 tokens x up to J of the P outputs); the parts' sums
//            go to a scratch and are added in part order.
//   dx       dx (N,D) += dproj w: a block takes 32 tokens (their dproj rows in shared memory) and 256 columns,
//            one column a thread; each element is read, summed over p in order and rounded once.
//   dw       dw (P,D) += dproj^T x: a block takes 64 columns and one of kSplit parts of the tokens (chunks of 32
//            staged), each thread 4 columns x up to J outputs; the parts' sums are added in part order.
// Every sum runs in a fixed order set by the shapes alone: deterministic, no atomics.
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 32;  // columns (forward) or tokens (dw) staged a step
constexpr int kSplit = 16;  // parts of D (forward) or of the tokens (dw): enough blocks to hide the loads
constexpr int kMaxP = 288;  // n = 16
constexpr int kFwdTokens = 64, kDxTokens = 32, kDwCols = 64;

template <class T>
__device__ __forceinline__ float as_f32(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return __bfloat162float(v);
}

// Segment s of [0, len) in kSplit parts.
__device__ __forceinline__ void segment(int64_t len, int s, int64_t& lo, int64_t& hi) {
  const int64_t per = (len + kSplit - 1) / kSplit;
  lo = min(len, s * per);
  hi = min(len, lo + per);
}

// part (kSplit, N, P): part[s] = x[:, part s of D] w[:, part s of D]^T. Thread (ty, tx): tokens ty + 16 i, outputs
// tx + 16 j.
template <class T, int J>
__global__ void __launch_bounds__(kThreads)
    proj_fwd_kernel(float* part, const T* x, const float* w, int64_t N, int64_t D, int P) {
  extern __shared__ float sm[];
  float* xs = sm;                              // [kFwdTokens][kChunk + 1]
  float* ws = sm + kFwdTokens * (kChunk + 1);  // [P][kChunk + 1]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t t0 = int64_t(blockIdx.x) * kFwdTokens;
  int64_t k_lo, k_hi;
  segment(D, blockIdx.y, k_lo, k_hi);
  float acc[4][J] = {};
  for (int64_t k0 = k_lo; k0 < k_hi; k0 += kChunk) {
    for (int e = threadIdx.x; e < kFwdTokens * kChunk; e += kThreads) {
      const int r = e / kChunk, c = e % kChunk;
      const int64_t t = t0 + r, k = k0 + c;
      xs[r * (kChunk + 1) + c] = t < N && k < k_hi ? as_f32(x[t * D + k]) : 0.0f;
    }
    for (int e = threadIdx.x; e < P * kChunk; e += kThreads) {
      const int p = e / kChunk, c = e % kChunk;
      const int64_t k = k0 + c;
      ws[p * (kChunk + 1) + c] = k < k_hi ? w[p * D + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kChunk; ++c) {
      float a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[(ty + 16 * i) * (kChunk + 1) + c];
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int p = tx + 16 * j;
        if (p >= P) break;
        const float b = ws[p * (kChunk + 1) + c];
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i][j] += a[i] * b;
      }
    }
    __syncthreads();
  }
  float* out = part + int64_t(blockIdx.y) * N * P;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    if (t >= N) continue;
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (tx + 16 * j < P) out[t * P + tx + 16 * j] = acc[i][j];
  }
}

// out[e] = (accumulate ? out[e] : 0) + the kSplit parts' element e, added in part order.
__global__ void sum_parts_kernel(float* out, const float* part, int64_t count, bool accumulate) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count; e += int64_t(gridDim.x) * blockDim.x) {
    float s = part[e];
    for (int q = 1; q < kSplit; ++q) s += part[q * count + e];
    out[e] = accumulate ? out[e] + s : s;
  }
}

// dx[t, d] += sum_p dproj[t, p] w[p, d] for the block's 32 tokens and 256 columns.
template <class T>
__global__ void __launch_bounds__(kThreads)
    proj_dx_kernel(T* dx, const float* dproj, const float* w, int64_t N, int64_t D, int P) {
  extern __shared__ float dps[];  // [kDxTokens][P4]: rows padded with zeros to whole float4s
  const int P4 = (P + 3) / 4 * 4;
  const int64_t t0 = int64_t(blockIdx.x) * kDxTokens, d = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  for (int e = threadIdx.x; e < kDxTokens * P4; e += kThreads) {
    const int64_t t = t0 + e / P4;
    const int p = e % P4;
    dps[e] = t < N && p < P ? dproj[t * P + p] : 0.0f;
  }
  __syncthreads();
  if (d >= D) return;
  float acc[kDxTokens] = {};
  for (int p = 0; p < P4; p += 4) {
    float wv[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) wv[q] = p + q < P ? w[(p + q) * D + d] : 0.0f;
#pragma unroll
    for (int i = 0; i < kDxTokens; ++i) {
      const float4 g = *reinterpret_cast<const float4*>(dps + i * P4 + p);  // p in order: x, y, z, w
      acc[i] += g.x * wv[0];
      acc[i] += g.y * wv[1];
      acc[i] += g.z * wv[2];
      acc[i] += g.w * wv[3];
    }
  }
#pragma unroll
  for (int i = 0; i < kDxTokens; ++i) {
    const int64_t t = t0 + i;
    if (t < N) {
      T& o = dx[t * D + d];
      o = T(as_f32(o) + acc[i]);
    }
  }
}

// part (kSplit, P, D): part[s][p, d] = sum over the tokens of part s of dproj[t, p] x[t, d]. Thread (pg, dq):
// columns 4 dq .. 4 dq + 4 of the block's 64, outputs pg + 16 j.
template <class T, int J>
__global__ void __launch_bounds__(kThreads)
    proj_dw_kernel(float* part, const float* dproj, const T* x, int64_t N, int64_t D, int P) {
  extern __shared__ float sm[];
  float* xs = sm;                      // [kChunk][kDwCols]
  float* dps = sm + kChunk * kDwCols;  // [kChunk][P]
  const int dq = threadIdx.x % 16, pg = threadIdx.x / 16;
  const int64_t c0 = int64_t(blockIdx.x) * kDwCols;
  int64_t t_lo, t_hi;
  segment(N, blockIdx.y, t_lo, t_hi);
  float acc[J][4] = {};
  for (int64_t s0 = t_lo; s0 < t_hi; s0 += kChunk) {
    for (int e = threadIdx.x; e < kChunk * kDwCols; e += kThreads) {
      const int64_t t = s0 + e / kDwCols, c = c0 + e % kDwCols;
      xs[e] = t < t_hi && c < D ? as_f32(x[t * D + c]) : 0.0f;
    }
    for (int e = threadIdx.x; e < kChunk * P; e += kThreads) {
      const int64_t t = s0 + e / P;
      dps[e] = t < t_hi ? dproj[t * P + e % P] : 0.0f;
    }
    __syncthreads();
    for (int tk = 0; tk < kChunk; ++tk) {
      const float4 xv = *reinterpret_cast<const float4*>(xs + tk * kDwCols + 4 * dq);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int p = pg + 16 * j;
        if (p >= P) break;
        const float g = dps[tk * P + p];
        acc[j][0] += g * xv.x;
        acc[j][1] += g * xv.y;
        acc[j][2] += g * xv.z;
        acc[j][3] += g * xv.w;
      }
    }
    __syncthreads();
  }
  float* out = part + int64_t(blockIdx.y) * P * D;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int p = pg + 16 * j;
    if (p >= P) break;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t c = c0 + 4 * dq + q;
      if (c < D) out[p * D + c] = acc[j][q];
    }
  }
}

// f(std::integral_constant<int, J>) for the outputs a thread holds: ceil(P / 16) rounded up to 2, 5 or 18.
template <class F>
void with_outputs(int64_t P, F&& f) {
  if (P <= 32)
    f(std::integral_constant<int, 2>{});
  else if (P <= 80)
    f(std::integral_constant<int, 5>{});
  else
    f(std::integral_constant<int, 18>{});
}

template <class F>
void with_stream_type(const Tensor& x, F&& f) {
  if (x.dtype() == DType::BF16)
    f(__nv_bfloat16{});
  else
    f(float{});
}

void check_sizes(const char* op, const Tensor& x, int64_t P) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", x.desc());
  HYTRA_CHECK(P >= 1 && P <= kMaxP, op, " on CUDA: at most ", kMaxP, " mapping outputs (n <= 16), got ", P);
  HYTRA_CHECK(x.size(0) < (int64_t(1) << 31) / kSplit, op, " on CUDA: too many tokens, ", x.size(0));
  HYTRA_CHECK(x.size(1) < int64_t(65535) * kThreads, op, " on CUDA: rows too long, ", x.size(1));
}

}  // namespace

void mhc_proj_fwd(Exec& ex, Tensor& proj, const Tensor& x, const Tensor& w) {
  const int64_t N = x.size(0), D = x.size(1), P = w.size(0);
  check_sizes("mhc_proj_fwd", x, P);
  if (N == 0) return;
  Tensor part = Tensor::empty({kSplit, N, P}, DType::F32, Device::CUDA);  // (kSplit, N, P)
  const cudaStream_t s = stream_of(ex);
  const size_t smem = size_t(kFwdTokens + P) * (kChunk + 1) * sizeof(float);
  const dim3 grid(unsigned((N + kFwdTokens - 1) / kFwdTokens), kSplit);
  with_stream_type(x, [&](auto t) {
    using T = decltype(t);
    with_outputs(P, [&](auto j) {
      proj_fwd_kernel<T, j.value><<<grid, kThreads, smem, s>>>(part.data<float>(), static_cast<const T*>(x.raw()),
                                                               w.data<float>(), N, D, int(P));
    });
  });
  check_launch("proj_fwd_kernel");
  sum_parts_kernel<<<grid_for(N * P, kThreads), kThreads, 0, s>>>(proj.data<float>(), part.data<float>(), N * P, false);
  check_launch("sum_parts_kernel");
}

void mhc_proj_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dproj, const Tensor& x, const Tensor& w) {
  const int64_t N = x.size(0), D = x.size(1), P = w.size(0);
  check_sizes("mhc_proj_bwd", x, P);
  if (N == 0) return;
  const cudaStream_t s = stream_of(ex);
  Tensor part = Tensor::empty({kSplit, P, D}, DType::F32, Device::CUDA);  // (kSplit, P, D)
  const dim3 dx_grid(unsigned((N + kDxTokens - 1) / kDxTokens), unsigned((D + kThreads - 1) / kThreads));
  const dim3 dw_grid(unsigned((D + kDwCols - 1) / kDwCols), kSplit);
  const size_t dx_smem = size_t(kDxTokens) * ((P + 3) / 4 * 4) * sizeof(float);
  const size_t dw_smem = size_t(kChunk) * (kDwCols + P) * sizeof(float);
  with_stream_type(x, [&](auto t) {
    using T = decltype(t);
    proj_dx_kernel<T><<<dx_grid, kThreads, dx_smem, s>>>(static_cast<T*>(dx.raw()), dproj.data<float>(),
                                                         w.data<float>(), N, D, int(P));
    check_launch("proj_dx_kernel");
    with_outputs(P, [&](auto j) {
      proj_dw_kernel<T, j.value><<<dw_grid, kThreads, dw_smem, s>>>(part.data<float>(), dproj.data<float>(),
                                                                    static_cast<const T*>(x.raw()), N, D, int(P));
    });
    check_launch("proj_dw_kernel");
  });
  sum_parts_kernel<<<grid_for(P * D, kThreads), kThreads, 0, s>>>(dw.data<float>(), part.data<float>(), P * D, true);
  check_launch("sum_parts_kernel");
}

}  // namespace hytra::cuda
