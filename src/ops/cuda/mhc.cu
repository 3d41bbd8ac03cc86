// mHC Sinkhorn-Knopp and mixing coefficients on CUDA (ops.h "mHC", docs/spec/mhc.md §2-§3); the maths
// and the backward formulas are those of ops/cpu/mhc.cpp (its header derives them), in fp32.
// One thread per n x n matrix (per token): its matrix lives in a local array sized for n <= NMAX,
// NMAX in {4, 8, 16} (the CUDA limit is n <= 16). The Sinkhorn backward runs the forward once more,
// keeping every step's input in a scratch laid out [step][element][matrix] (consecutive threads,
// consecutive addresses), then walks the steps last to first.
// Coefficients: per-token thread work (r from the rms that mhc_proj_fwd measured). dbias and dalpha are
// deterministic: the per-token dh (N, P) goes to a scratch buffer, row chunks set by N alone sum
// their tokens into partials (chunks, P+3) in a fixed order (kParamLanes interleaved lanes, then the lanes in
// order), and one kernel adds the chunks (a warp per column, in a fixed order). With n = 2, 4 or 8 a compile-time
// constant (with_capacity), the per-token arrays live in registers.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

using ops::MhcVariant;

constexpr int kMaxN = 16;
constexpr float kSinkEps = 1e-6f;
constexpr float kRmsEps = 1e-6f;
constexpr int kTokenThreads = 128;
constexpr int kBwdThreads = 32;  // the Sinkhorn backward is long per thread: small blocks spread it over every SM
constexpr int64_t kMaxChunks = 128;

// Steps of a run: main T x (row, col); dev col, (T-1) x (row, col).
__host__ __device__ __forceinline__ int64_t num_steps(int64_t iterations, bool dev) {
  return dev ? 2 * iterations - 1 : 2 * iterations;
}
__device__ __forceinline__ bool step_rows(int64_t s, bool dev) { return (s % 2 == 0) != dev; }
// Element k of line i (row i or column i) of an n x n row-major matrix.
__device__ __forceinline__ int at(bool rows, int n, int i, int k) { return rows ? i * n + k : k * n + i; }

__device__ __forceinline__ float line_sum(const float* m, bool rows, int n, int i) {
  float s = 0.0f;
  for (int k = 0; k < n; ++k) s += m[at(rows, n, i, k)];
  return s;
}
__device__ __forceinline__ float denominator(float s, bool dev) { return dev ? s + kSinkEps : fmaxf(s, kSinkEps); }

// p (n) = exp(l - max l) of one logit row, and its sum.
__device__ __forceinline__ float row_exp(float* p, const float* l, int n) {
  float mx = l[0];
  for (int k = 1; k < n; ++k) mx = fmaxf(mx, l[k]);
  float s = 0.0f;
  for (int k = 0; k < n; ++k) s += p[k] = expf(l[k] - mx);
  return s;
}

// Every row (kRows) or column of m (n x n) divided by its denominator. The line kind is a template argument so that,
// with n a constant, every index is one and m stays in registers.
template <bool kRows>
__device__ __forceinline__ void divide_lines(float* m, int n, bool dev) {
  for (int i = 0; i < n; ++i) {
    const float d = denominator(line_sum(m, kRows, n, i), dev);
    for (int k = 0; k < n; ++k) m[at(kRows, n, i, k)] = m[at(kRows, n, i, k)] / d;
  }
}

// Step st of a run on m (n x n): every row (or column) divided by its denominator.
__device__ __forceinline__ void sinkhorn_step(float* m, int n, int64_t st, bool dev) {
  if (step_rows(st, dev))
    divide_lines<true>(m, n, dev);
  else
    divide_lines<false>(m, n, dev);
}

// m (n x n) = the Sinkhorn iterate after `steps` steps (0: M0) of logits l (n x n).
__device__ void sinkhorn_iterate(float* m, const float* l, int n, int64_t steps, bool dev) {
  for (int i = 0; i < n; ++i) {
    const float s = row_exp(m + i * n, l + i * n, n);
    if (dev)
      for (int k = 0; k < n; ++k) m[i * n + k] = m[i * n + k] / s + kSinkEps;
  }
  for (int64_t st = 0; st < steps; ++st) sinkhorn_step(m, n, st, dev);
}

// The steps' inputs of matrix `r` of R in the scratch `its` (steps, n*n, R): element k of step st's input.
__device__ __forceinline__ float& step_input(float* its, int64_t R, int64_t r, int nn, int64_t st, int k) {
  return its[(st * nn + k) * R + r];
}

// g (n x n) = the gradient of one step's input m given g, the gradient of its output (divide_lines<kRows>).
template <bool kRows>
__device__ __forceinline__ void divide_lines_backward(float* g, const float* m, int n, bool dev) {
  for (int i = 0; i < n; ++i) {
    const float s = line_sum(m, kRows, n, i), d = denominator(s, dev);
    float gy = 0.0f;
    if (dev || s >= kSinkEps)
      for (int k = 0; k < n; ++k) gy += g[at(kRows, n, i, k)] * (m[at(kRows, n, i, k)] / d);
    for (int k = 0; k < n; ++k) g[at(kRows, n, i, k)] = (g[at(kRows, n, i, k)] - gy) / d;
  }
}

// dl (n x n) = dL given g = dM (n x n, overwritten) for matrix r of R; m is n x n scratch, its the steps' inputs.
__device__ void sinkhorn_backward(float* dl, float* g, float* m, const float* l, int n, int64_t iterations, bool dev,
                                  float* its, int64_t R, int64_t r) {
  const int nn = n * n;
  const int64_t steps = num_steps(iterations, dev);
  sinkhorn_iterate(m, l, n, 0, dev);
  for (int64_t st = 0; st < steps; ++st) {
    for (int k = 0; k < nn; ++k) step_input(its, R, r, nn, st, k) = m[k];
    sinkhorn_step(m, n, st, dev);
  }
  for (int64_t st = steps - 1; st >= 0; --st) {
    for (int k = 0; k < nn; ++k) m[k] = step_input(its, R, r, nn, st, k);
    if (step_rows(st, dev))
      divide_lines_backward<true>(g, m, n, dev);
    else
      divide_lines_backward<false>(g, m, n, dev);
  }
  for (int i = 0; i < n; ++i) {
    float* p = m + i * n;
    const float s = row_exp(p, l + i * n, n);
    const float* gi = g + i * n;
    if (!dev) {
      for (int k = 0; k < n; ++k) dl[i * n + k] = gi[k] * p[k];
      continue;
    }
    float gp = 0.0f;
    for (int k = 0; k < n; ++k) gp += gi[k] * (p[k] /= s);
    for (int k = 0; k < n; ++k) dl[i * n + k] = p[k] * (gi[k] - gp);
  }
}

template <int NMAX, bool kExact>
__global__ void sinkhorn_fwd_kernel(float* M, const float* L, int64_t R, int n, int64_t iterations, bool dev) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the arrays live in registers
  float m[NMAX * NMAX];
  const int64_t nn = int64_t(n) * n;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < R; r += int64_t(gridDim.x) * blockDim.x) {
    sinkhorn_iterate(m, L + r * nn, n, num_steps(iterations, dev), dev);
    for (int k = 0; k < nn; ++k) M[r * nn + k] = m[k];
  }
}

template <int NMAX, bool kExact>
__global__ void sinkhorn_bwd_kernel(float* dL, const float* dM, const float* L, int64_t R, int n, int64_t iterations,
                                    bool dev, float* its) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the arrays live in registers
  float g[NMAX * NMAX], m[NMAX * NMAX];
  const int64_t nn = int64_t(n) * n;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < R; r += int64_t(gridDim.x) * blockDim.x) {
    for (int k = 0; k < nn; ++k) g[k] = dM[r * nn + k];
    sinkhorn_backward(dL + r * nn, g, m, L + r * nn, n, iterations, dev, its, R, r);
  }
}

// alpha expanded: slice k of P = n^2 + 2n.
__device__ __forceinline__ float alpha_of(const float* alpha, int n, int k) { return alpha[k < 2 * n ? k / n : 2]; }

template <int NMAX, bool kExact>
__global__ void coeffs_fwd_kernel(float* h_pre, float* h_post, float* h_res, float* r, const float* rms,
                                  const float* proj, const float* alpha, const float* bias, int64_t N, int n,
                                  int64_t iterations, bool dev) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the arrays live in registers
  float h[NMAX * NMAX + 2 * NMAX], m[NMAX * NMAX];
  const int P = n * n + 2 * n;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x) {
    const float rt = 1.0f / (rms[t] + kRmsEps);
    r[t] = rt;
    for (int k = 0; k < P; ++k) h[k] = rt * proj[t * P + k] * alpha_of(alpha, n, k) + bias[k];
    for (int i = 0; i < n; ++i) {
      h_pre[t * n + i] = sigmoid(h[i]) + (dev ? kSinkEps : 0.0f);
      h_post[t * n + i] = 2.0f * sigmoid(h[n + i]);
    }
    sinkhorn_iterate(m, h + 2 * n, n, num_steps(iterations, dev), dev);
    float* out = h_res + t * n * n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) out[i * n + j] = dev ? m[j * n + i] : m[i * n + j];
  }
}

// Per token: dproj (N,P) =, dr (N) and dh (N,P) into scratch.
template <int NMAX, bool kExact>
__global__ void coeffs_bwd_token_kernel(float* dproj, float* dr, float* dh_out, const float* dh_pre,
                                        const float* dh_post, const float* dh_res, const float* r, const float* proj,
                                        const float* alpha, const float* bias, int64_t N, int n, int64_t iterations,
                                        bool dev, float* its) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the arrays live in registers
  float h[NMAX * NMAX + 2 * NMAX], dh[NMAX * NMAX + 2 * NMAX], g[NMAX * NMAX], m[NMAX * NMAX];
  const int P = n * n + 2 * n;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x) {
    const float rt = r[t];
    const float* pt = proj + t * P;
    for (int k = 0; k < P; ++k) h[k] = rt * pt[k] * alpha_of(alpha, n, k) + bias[k];
    for (int i = 0; i < n; ++i) {
      const float sp = sigmoid(h[i]), sq = sigmoid(h[n + i]);
      dh[i] = dh_pre[t * n + i] * sp * (1.0f - sp);
      dh[n + i] = dh_post[t * n + i] * 2.0f * sq * (1.0f - sq);
    }
    const float* dres = dh_res + t * n * n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) g[i * n + j] = dev ? dres[j * n + i] : dres[i * n + j];
    sinkhorn_backward(dh + 2 * n, g, m, h + 2 * n, n, iterations, dev, its, N, t);
    float drt = 0.0f;
    for (int k = 0; k < P; ++k) {
      const float a = alpha_of(alpha, n, k);
      dproj[t * P + k] = dh[k] * rt * a;
      drt += dh[k] * pt[k] * a;
      dh_out[t * P + k] = dh[k];
    }
    dr[t] = drt;
  }
}

// partial (chunks, P+3): columns [0,P) sum dh (dbias), P+g sum dh_k r proj_k over slice g (dalpha),
// each over the tokens of its chunk. Grid: chunks blocks of 32 x kParamLanes threads: thread (x, y) sums the chunk's
// tokens y, y + kParamLanes, ... in order for columns x, x + 32, ...; then the kParamLanes sums in y order.
constexpr int kParamLanes = 8;
__global__ void __launch_bounds__(32 * kParamLanes)
    coeffs_param_partial_kernel(float* partial, const float* dh, const float* r, const float* proj, int64_t N, int n,
                                int64_t rows_per_chunk) {
  __shared__ float sums[kParamLanes][32];
  const int P = n * n + 2 * n, Q = P + 3;
  const int64_t t0 = blockIdx.x * rows_per_chunk, t1 = min(N, t0 + rows_per_chunk);
  for (int q0 = 0; q0 < Q; q0 += 32) {
    const int q = q0 + int(threadIdx.x);
    float s = 0.0f;
    if (q < P) {
      for (int64_t t = t0 + threadIdx.y; t < t1; t += kParamLanes) s += dh[t * P + q];
    } else if (q < Q) {
      const int g = q - P, k0 = g * n, k1 = g < 2 ? k0 + n : P;
      for (int64_t t = t0 + threadIdx.y; t < t1; t += kParamLanes)
        for (int k = k0; k < k1; ++k) s += dh[t * P + k] * r[t] * proj[t * P + k];
    }
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && q < Q) {
      float total = 0.0f;
      for (int y = 0; y < kParamLanes; ++y) total += sums[y][threadIdx.x];
      partial[blockIdx.x * Q + q] = total;
    }
    __syncthreads();
  }
}

// dbias (P) += and dalpha (3) += the chunk partials: a warp per column, lane l adding chunks l, l + 32, ... in order,
// then the lanes by warp_sum's fixed butterfly.
constexpr int kCombineWarps = 8;
__global__ void coeffs_param_combine_kernel(float* dbias, float* dalpha, const float* partial, int64_t chunks, int n) {
  const int P = n * n + 2 * n, Q = P + 3;
  const int q = int(blockIdx.x) * kCombineWarps + int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (q >= Q) return;
  float s = 0.0f;
  for (int64_t c = lane; c < chunks; c += 32) s += partial[c * Q + q];
  s = warp_sum(s);
  if (lane != 0) return;
  if (q < P)
    dbias[q] += s;
  else
    dalpha[q - P] += s;
}

// f(std::integral_constant<int, NMAX>, std::integral_constant<bool, exact>) with the smallest local-array capacity
// that holds n; exact (n = NMAX, a compile-time constant in the kernels) for the usual n = 2, 4, 8.
template <class F>
void with_capacity(const char* op, int64_t n, F&& f) {
  HYTRA_CHECK(n <= kMaxN, op, " on CUDA: n must be <= ", kMaxN, ", got ", n);
  using Exact = std::true_type;
  using Runtime = std::false_type;
  if (n == 2)
    f(std::integral_constant<int, 2>{}, Exact{});
  else if (n == 4)
    f(std::integral_constant<int, 4>{}, Exact{});
  else if (n == 8)
    f(std::integral_constant<int, 8>{}, Exact{});
  else if (n < 4)
    f(std::integral_constant<int, 4>{}, Runtime{});
  else if (n < 8)
    f(std::integral_constant<int, 8>{}, Runtime{});
  else
    f(std::integral_constant<int, 16>{}, Runtime{});
}

// The scratch of the Sinkhorn backward's step inputs for R matrices: (steps, n*n, R) fp32.
Tensor step_inputs(int64_t R, int64_t n, int64_t iterations, MhcVariant variant) {
  return Tensor::empty({num_steps(iterations, variant == MhcVariant::Dev), n * n, R}, DType::F32, Device::CUDA);
}

void check_fp32_only(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) HYTRA_CHECK(t->dtype() == DType::F32, op, " on CUDA: expected fp32, got ", t->desc());
}

}  // namespace

void sinkhorn_fwd(Exec& ex, Tensor& M, const Tensor& logits, int64_t iterations, ops::MhcVariant variant) {
  check_fp32_only("sinkhorn_fwd", {&M, &logits});
  const int64_t R = logits.size(0), n = logits.size(1);
  if (R == 0) return;
  with_capacity("sinkhorn_fwd", n, [&](auto cap, auto exact) {
    sinkhorn_fwd_kernel<cap.value, exact.value><<<grid_for(R, kTokenThreads), kTokenThreads, 0, stream_of(ex)>>>(
        M.data<float>(), logits.data<float>(), R, int(n), iterations, variant == MhcVariant::Dev);
    check_launch("sinkhorn_fwd_kernel");
  });
}

void sinkhorn_bwd(Exec& ex, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations,
                  ops::MhcVariant variant) {
  check_fp32_only("sinkhorn_bwd", {&dlogits, &dM, &logits});
  const int64_t R = logits.size(0), n = logits.size(1);
  if (R == 0) return;
  Tensor its = step_inputs(R, n, iterations, variant);
  with_capacity("sinkhorn_bwd", n, [&](auto cap, auto exact) {
    sinkhorn_bwd_kernel<cap.value, exact.value><<<grid_for(R, kBwdThreads), kBwdThreads, 0, stream_of(ex)>>>(
        dlogits.data<float>(), dM.data<float>(), logits.data<float>(), R, int(n), iterations,
        variant == MhcVariant::Dev, its.data<float>());
    check_launch("sinkhorn_bwd_kernel");
  });
}

void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& rms,
                    const Tensor& proj, const Tensor& alpha, const Tensor& bias, int64_t iterations,
                    ops::MhcVariant variant) {
  const char* op = "mhc_coeffs_fwd";
  check_fp32_only(op, {&h_pre, &h_post, &h_res, &r, &rms, &proj, &alpha, &bias});
  const int64_t N = proj.size(0), n = h_res.size(1);
  if (N == 0) return;
  with_capacity(op, n, [&](auto cap, auto exact) {
    coeffs_fwd_kernel<cap.value, exact.value><<<grid_for(N, kTokenThreads), kTokenThreads, 0, stream_of(ex)>>>(
        h_pre.data<float>(), h_post.data<float>(), h_res.data<float>(), r.data<float>(), rms.data<float>(),
        proj.data<float>(), alpha.data<float>(), bias.data<float>(), N, int(n), iterations, variant == MhcVariant::Dev);
    check_launch("coeffs_fwd_kernel");
  });
}

void mhc_coeffs_bwd(Exec& ex, Tensor& dproj, Tensor& dr, Tensor& dalpha, Tensor& dbias, const Tensor& dh_pre,
                    const Tensor& dh_post, const Tensor& dh_res, const Tensor& proj, const Tensor& alpha,
                    const Tensor& bias, const Tensor& r, int64_t iterations, ops::MhcVariant variant) {
  const char* op = "mhc_coeffs_bwd";
  check_fp32_only(op, {&dproj, &dr, &dalpha, &dbias, &dh_pre, &dh_post, &dh_res, &proj, &alpha, &bias, &r});
  const int64_t N = proj.size(0), n = dh_res.size(1), P = n * n + 2 * n;
  if (N == 0) return;
  cudaStream_t s = stream_of(ex);
  Tensor dh = Tensor::empty({N, P}, DType::F32, Device::CUDA);  // (N, P)
  Tensor its = step_inputs(N, n, iterations, variant);
  with_capacity(op, n, [&](auto cap, auto exact) {
    coeffs_bwd_token_kernel<cap.value, exact.value><<<grid_for(N, kBwdThreads), kBwdThreads, 0, s>>>(
        dproj.data<float>(), dr.data<float>(), dh.data<float>(), dh_pre.data<float>(), dh_post.data<float>(),
        dh_res.data<float>(), r.data<float>(), proj.data<float>(), alpha.data<float>(), bias.data<float>(), N, int(n),
        iterations, variant == MhcVariant::Dev, its.data<float>());
    check_launch("coeffs_bwd_token_kernel");
  });
  const int64_t chunks = N < kMaxChunks ? N : kMaxChunks;
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  Tensor partial = Tensor::empty({chunks, P + 3}, DType::F32, Device::CUDA);  // (chunks, P+3)
  coeffs_param_partial_kernel<<<unsigned(chunks), dim3(32, kParamLanes), 0, s>>>(
      partial.data<float>(), dh.data<float>(), r.data<float>(), proj.data<float>(), N, int(n), rows_per_chunk);
  check_launch("coeffs_param_partial_kernel");
  coeffs_param_combine_kernel<<<unsigned((P + 3 + kCombineWarps - 1) / kCombineWarps), 32 * kCombineWarps, 0, s>>>(
      dbias.data<float>(), dalpha.data<float>(), partial.data<float>(), chunks, int(n));
  check_launch("coeffs_param_combine_kernel");
}

}  // namespace hytra::cuda
