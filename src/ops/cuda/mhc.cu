// mHC Sinkhorn-Knopp and mixing coefficients on CUDA (ops.h "mHC", docs/spec/mhc.md §2-§3); the maths
// and the backward formulas are those of ops/cpu/mhc.cpp (its header derives them), in fp32.
// A group of NMAX lanes (NMAX in {2, 4, 8, 16}, the smallest that holds n; the CUDA limit is n <= 16) takes one
// n x n matrix (one token): lane i holds row i in registers (lanes i >= n repeat row n - 1 and store nothing). A
// column's sum gathers its n elements by shuffles and adds them in row order, so every sum runs in the order of the
// CPU reference's. The Sinkhorn backward runs the forward once more, keeping every step's input in a scratch laid
// out [step][matrix][element] (each lane its row), then walks the steps last to first.
// Coefficients: per-token group work (r from the rms that mhc_proj_fwd measured). dbias and dalpha are
// deterministic: the per-token dh (N, P) goes to a scratch buffer, row chunks set by N alone sum
// their tokens into partials (chunks, P+3) in a fixed order (kParamLanes interleaved lanes, then the lanes in
// order), and one kernel adds the chunks (a warp per column, in a fixed order). With n = 2, 4 or 8 a compile-time
// constant (with_capacity), the rows live in registers.
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
constexpr int kGroupThreads = 128;
constexpr int64_t kMaxChunks = 512;

// Steps of a run: main T x (row, col); dev col, (T-1) x (row, col).
__host__ __device__ __forceinline__ int64_t num_steps(int64_t iterations, bool dev) {
  return dev ? 2 * iterations - 1 : 2 * iterations;
}
__device__ __forceinline__ bool step_rows(int64_t s, bool dev) { return (s % 2 == 0) != dev; }
__device__ __forceinline__ float denominator(float s, bool dev) { return dev ? s + kSinkEps : fmaxf(s, kSinkEps); }

// One lane's place in its matrix group: its row i (clamped to n - 1), whether it stores, and its matrix r (clamped to
// R - 1), for the matrices base .. base + kGroupThreads / NMAX of a block's pass. Every lane of a warp runs every
// shuffle (the groups past R compute a copy of the last matrix and store nothing; in the Sinkhorn backward's scratch
// a repeating lane writes the very values of the lane it repeats).
template <int NMAX>
struct Lane {
  int i;
  int64_t r;
  bool store;
  __device__ Lane(int64_t base, int64_t R, int n) {
    const int g = int(threadIdx.x) % NMAX;
    const int64_t m = base + int(threadIdx.x) / NMAX;
    i = min(g, n - 1);
    r = min(m, R - 1);
    store = g < n && m < R;
  }
};
template <int NMAX>
constexpr int kGroupsPerBlock = kGroupThreads / NMAX;

// The sum over the group's rows j < n of v (lane j's), added in row order; every lane gets it.
template <int NMAX>
__device__ __forceinline__ float column_sum(float v, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; ++j) s += __shfl_sync(0xffffffffu, v, j, NMAX);
  return s;
}

// p (n) = exp(l - max l) of one logit row, and its sum.
template <int NMAX>
__device__ __forceinline__ float row_exp(float (&p)[NMAX], const float* l, int n) {
  float mx = l[0];
  for (int k = 1; k < n; ++k) mx = fmaxf(mx, l[k]);
  float s = 0.0f;
  for (int k = 0; k < n; ++k) s += p[k] = expf(l[k] - mx);
  return s;
}

// Step st of a run on the group's matrix (m: this lane's row): every row (or column) divided by its denominator.
template <int NMAX>
__device__ __forceinline__ void sinkhorn_step(float (&m)[NMAX], int n, int64_t st, bool dev) {
  if (step_rows(st, dev)) {
    float s = 0.0f;
    for (int k = 0; k < n; ++k) s += m[k];
    const float d = denominator(s, dev);
    for (int k = 0; k < n; ++k) m[k] = m[k] / d;
  } else {
    for (int k = 0; k < n; ++k) m[k] = m[k] / denominator(column_sum<NMAX>(m[k], n), dev);
  }
}

// m = this lane's row of the Sinkhorn iterate after `steps` steps (0: M0) of the logits' row l.
template <int NMAX>
__device__ void sinkhorn_iterate(float (&m)[NMAX], const float* l, int n, int64_t steps, bool dev) {
  const float s = row_exp(m, l, n);
  if (dev)
    for (int k = 0; k < n; ++k) m[k] = m[k] / s + kSinkEps;
  for (int64_t st = 0; st < steps; ++st) sinkhorn_step(m, n, st, dev);
}

// g = this lane's row of the gradient of one step's input m given g, the gradient of its output.
template <int NMAX>
__device__ __forceinline__ void sinkhorn_step_backward(float (&g)[NMAX], const float (&m)[NMAX], int n, int64_t st,
                                                       bool dev) {
  if (step_rows(st, dev)) {
    float s = 0.0f;
    for (int k = 0; k < n; ++k) s += m[k];
    const float d = denominator(s, dev);
    float gy = 0.0f;
    if (dev || s >= kSinkEps)
      for (int k = 0; k < n; ++k) gy += g[k] * (m[k] / d);
    for (int k = 0; k < n; ++k) g[k] = (g[k] - gy) / d;
  } else {
    for (int k = 0; k < n; ++k) {
      const float s = column_sum<NMAX>(m[k], n), d = denominator(s, dev);
      const float gy = column_sum<NMAX>(g[k] * (m[k] / d), n);  // every lane shuffles: the test comes after
      g[k] = (g[k] - (dev || s >= kSinkEps ? gy : 0.0f)) / d;
    }
  }
}

// dl = this lane's row of dL given g, its row of dM (overwritten), and l, its row of the logits; its: the scratch of
// the steps' inputs (steps, R, n*n) of matrix r.
template <int NMAX>
__device__ void sinkhorn_backward(float (&dl)[NMAX], float (&g)[NMAX], const float* l, int n, int64_t iterations,
                                  bool dev, float* its, int64_t R, int64_t r, int i) {
  const int64_t nn = int64_t(n) * n, steps = num_steps(iterations, dev);
  float m[NMAX];
  sinkhorn_iterate(m, l, n, 0, dev);
  for (int64_t st = 0; st < steps; ++st) {
    float* in = its + (st * R + r) * nn + i * n;
    for (int k = 0; k < n; ++k) in[k] = m[k];
    sinkhorn_step(m, n, st, dev);
  }
  for (int64_t st = steps - 1; st >= 0; --st) {
    const float* in = its + (st * R + r) * nn + i * n;
    for (int k = 0; k < n; ++k) m[k] = in[k];
    sinkhorn_step_backward(g, m, n, st, dev);
  }
  const float s = row_exp(m, l, n);
  if (!dev) {
    for (int k = 0; k < n; ++k) dl[k] = g[k] * m[k];
    return;
  }
  float gp = 0.0f;
  for (int k = 0; k < n; ++k) gp += g[k] * (m[k] /= s);
  for (int k = 0; k < n; ++k) dl[k] = m[k] * (g[k] - gp);
}

template <int NMAX, bool kExact>
__global__ void __launch_bounds__(kGroupThreads)
    sinkhorn_fwd_kernel(float* M, const float* L, int64_t R, int n, int64_t iterations, bool dev) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the rows live in registers
  float m[NMAX];
  const int64_t nn = int64_t(n) * n;
  for (int64_t base = blockIdx.x * kGroupsPerBlock<NMAX>; base < R; base += gridDim.x * kGroupsPerBlock<NMAX>) {
    const Lane<NMAX> ln(base, R, n);
    sinkhorn_iterate(m, L + ln.r * nn + ln.i * n, n, num_steps(iterations, dev), dev);
    if (ln.store)
      for (int k = 0; k < n; ++k) M[ln.r * nn + ln.i * n + k] = m[k];
  }
}

template <int NMAX, bool kExact>
__global__ void __launch_bounds__(kGroupThreads)
    sinkhorn_bwd_kernel(float* dL, const float* dM, const float* L, int64_t R, int n, int64_t iterations, bool dev,
                        float* its) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the rows live in registers
  float g[NMAX], dl[NMAX];
  const int64_t nn = int64_t(n) * n;
  for (int64_t base = blockIdx.x * kGroupsPerBlock<NMAX>; base < R; base += gridDim.x * kGroupsPerBlock<NMAX>) {
    const Lane<NMAX> ln(base, R, n);
    const int64_t row = ln.r * nn + ln.i * n;
    for (int k = 0; k < n; ++k) g[k] = dM[row + k];
    sinkhorn_backward(dl, g, L + row, n, iterations, dev, its, R, ln.r, ln.i);
    if (ln.store)
      for (int k = 0; k < n; ++k) dL[row + k] = dl[k];
  }
}

// The gating factors alpha_pre, alpha_post, alpha_res (one float each, the parameters themselves), and their
// gradients.
struct Alphas {
  const float* a[3];
};
struct AlphaGrads {
  float* a[3];
};

// The lane's pre-activations of token t: h_pre's (k = i), h_post's (k = n + i) and its logit row (k = 2n + i n ..).
template <int NMAX>
__device__ __forceinline__ void token_preacts(float& hp, float& hq, float (&l)[NMAX], const float* pt, float rt,
                                              const float (&alpha)[3], const float* bias, int n, int i) {
  hp = rt * pt[i] * alpha[0] + bias[i];
  hq = rt * pt[n + i] * alpha[1] + bias[n + i];
  const int k0 = 2 * n + i * n;
  for (int k = 0; k < n; ++k) l[k] = rt * pt[k0 + k] * alpha[2] + bias[k0 + k];
}

template <int NMAX, bool kExact>
__global__ void __launch_bounds__(kGroupThreads)
    coeffs_fwd_kernel(float* h_pre, float* h_post, float* h_res, float* r, const float* rms, const float* proj,
                      Alphas alphas, const float* bias, int64_t N, int n, int64_t iterations, bool dev) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the rows live in registers
  const float alpha[3] = {*alphas.a[0], *alphas.a[1], *alphas.a[2]};
  float l[NMAX], m[NMAX];
  const int P = n * n + 2 * n;
  for (int64_t base = blockIdx.x * kGroupsPerBlock<NMAX>; base < N; base += gridDim.x * kGroupsPerBlock<NMAX>) {
    const Lane<NMAX> ln(base, N, n);
    const int64_t t = ln.r;
    const int i = ln.i;
    const float rt = 1.0f / (rms[t] + kRmsEps);
    float hp, hq;
    token_preacts(hp, hq, l, proj + t * P, rt, alpha, bias, n, i);
    sinkhorn_iterate(m, l, n, num_steps(iterations, dev), dev);
    if (!ln.store) continue;
    if (i == 0) r[t] = rt;
    h_pre[t * n + i] = sigmoid(hp) + (dev ? kSinkEps : 0.0f);
    h_post[t * n + i] = 2.0f * sigmoid(hq);
    float* out = h_res + t * n * n;
    for (int k = 0; k < n; ++k) out[dev ? k * n + i : i * n + k] = m[k];  // dev: the transpose
  }
}

// Per token: dproj (N,P) =, dr (N) and dh (N,P) into scratch. dr sums its P terms in k order across the group's lanes.
template <int NMAX, bool kExact>
__global__ void __launch_bounds__(kGroupThreads)
    coeffs_bwd_token_kernel(float* dproj, float* dr, float* dh_out, const float* dh_pre, const float* dh_post,
                            const float* dh_res, const float* r, const float* proj, Alphas alphas,
                            const float* bias, int64_t N, int n, int64_t iterations, bool dev, float* its) {
  if constexpr (kExact) n = NMAX;  // a constant: the loops over n unroll and the rows live in registers
  const float alpha[3] = {*alphas.a[0], *alphas.a[1], *alphas.a[2]};
  float l[NMAX], g[NMAX], dl[NMAX];
  const int P = n * n + 2 * n;
  for (int64_t base = blockIdx.x * kGroupsPerBlock<NMAX>; base < N; base += gridDim.x * kGroupsPerBlock<NMAX>) {
    const Lane<NMAX> ln(base, N, n);
    const int64_t t = ln.r;
    const int i = ln.i;
    const float rt = r[t];
    const float* pt = proj + t * P;
    float hp, hq;
    token_preacts(hp, hq, l, pt, rt, alpha, bias, n, i);
    const float sp = sigmoid(hp), sq = sigmoid(hq);
    const float dp = dh_pre[t * n + i] * sp * (1.0f - sp);
    const float dq = dh_post[t * n + i] * 2.0f * sq * (1.0f - sq);
    const float* dres = dh_res + t * n * n;
    for (int k = 0; k < n; ++k) g[k] = dres[dev ? k * n + i : i * n + k];
    sinkhorn_backward(dl, g, l, n, iterations, dev, its, N, t, i);
    // dr = sum over k in order of dh[k] proj[k] alpha[k]: h_pre's n terms, h_post's, then the logits row by row.
    const int k0 = 2 * n + i * n;
    const float xp = dp * pt[i], xq = dq * pt[n + i];
    float drt = 0.0f;
    for (int j = 0; j < n; ++j) drt += __shfl_sync(0xffffffffu, xp, j, NMAX) * alpha[0];
    for (int j = 0; j < n; ++j) drt += __shfl_sync(0xffffffffu, xq, j, NMAX) * alpha[1];
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) drt += __shfl_sync(0xffffffffu, dl[k] * pt[k0 + k], j, NMAX) * alpha[2];
    if (!ln.store) continue;
    float* dpt = dproj + t * P;
    float* dht = dh_out + t * P;
    dpt[i] = dp * rt * alpha[0];
    dpt[n + i] = dq * rt * alpha[1];
    dht[i] = dp;
    dht[n + i] = dq;
    for (int k = 0; k < n; ++k) {
      dpt[k0 + k] = dl[k] * rt * alpha[2];
      dht[k0 + k] = dl[k];
    }
    if (i == 0) dr[t] = drt;
  }
}

// partial (chunks, P+3): columns [0,P) sum dh (dbias), P+g sum dh_k r proj_k over slice g (pre, post, res: dalpha),
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

// dbias (P) += and the three dalpha += the chunk partials: a warp per column, lane l adding chunks l, l + 32, ... in order,
// then the lanes by warp_sum's fixed butterfly.
constexpr int kCombineWarps = 8;
__global__ void coeffs_param_combine_kernel(float* dbias, AlphaGrads dalpha, const float* partial, int64_t chunks,
                                            int n) {
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
    *dalpha.a[q - P] += s;
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

// The scratch of the Sinkhorn backward's step inputs for R matrices: (steps, R, n*n) fp32.
Tensor step_inputs(int64_t R, int64_t n, int64_t iterations, MhcVariant variant) {
  return Tensor::empty({num_steps(iterations, variant == MhcVariant::Dev), R, n * n}, DType::F32, Device::CUDA);
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
    sinkhorn_fwd_kernel<cap.value, exact.value>
        <<<grid_for(R, kGroupsPerBlock<cap.value>), kGroupThreads, 0, stream_of(ex)>>>(
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
    sinkhorn_bwd_kernel<cap.value, exact.value>
        <<<grid_for(R, kGroupsPerBlock<cap.value>), kGroupThreads, 0, stream_of(ex)>>>(
            dlogits.data<float>(), dM.data<float>(), logits.data<float>(), R, int(n), iterations,
            variant == MhcVariant::Dev, its.data<float>());
    check_launch("sinkhorn_bwd_kernel");
  });
}

void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& rms,
                    const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post, const Tensor& alpha_res,
                    const Tensor& bias, int64_t iterations, ops::MhcVariant variant) {
  const char* op = "mhc_coeffs_fwd";
  check_fp32_only(op, {&h_pre, &h_post, &h_res, &r, &rms, &proj, &alpha_pre, &alpha_post, &alpha_res, &bias});
  const Alphas alphas{{alpha_pre.data<float>(), alpha_post.data<float>(), alpha_res.data<float>()}};
  const int64_t N = proj.size(0), n = h_res.size(1);
  if (N == 0) return;
  with_capacity(op, n, [&](auto cap, auto exact) {
    coeffs_fwd_kernel<cap.value, exact.value>
        <<<grid_for(N, kGroupsPerBlock<cap.value>), kGroupThreads, 0, stream_of(ex)>>>(
            h_pre.data<float>(), h_post.data<float>(), h_res.data<float>(), r.data<float>(), rms.data<float>(),
            proj.data<float>(), alphas, bias.data<float>(), N, int(n), iterations,
            variant == MhcVariant::Dev);
    check_launch("coeffs_fwd_kernel");
  });
}

void mhc_coeffs_bwd(Exec& ex, Tensor& dproj, Tensor& dr, Tensor& dalpha_pre, Tensor& dalpha_post, Tensor& dalpha_res,
                    Tensor& dbias, const Tensor& dh_pre, const Tensor& dh_post, const Tensor& dh_res,
                    const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post, const Tensor& alpha_res,
                    const Tensor& bias, const Tensor& r, int64_t iterations, ops::MhcVariant variant) {
  const char* op = "mhc_coeffs_bwd";
  check_fp32_only(op, {&dproj, &dr, &dalpha_pre, &dalpha_post, &dalpha_res, &dbias, &dh_pre, &dh_post, &dh_res, &proj,
                       &alpha_pre, &alpha_post, &alpha_res, &bias, &r});
  const Alphas alphas{{alpha_pre.data<float>(), alpha_post.data<float>(), alpha_res.data<float>()}};
  const AlphaGrads dalphas{{dalpha_pre.data<float>(), dalpha_post.data<float>(), dalpha_res.data<float>()}};
  const int64_t N = proj.size(0), n = dh_res.size(1), P = n * n + 2 * n;
  if (N == 0) return;
  cudaStream_t s = stream_of(ex);
  Tensor dh = Tensor::empty({N, P}, DType::F32, Device::CUDA);  // (N, P)
  Tensor its = step_inputs(N, n, iterations, variant);
  with_capacity(op, n, [&](auto cap, auto exact) {
    coeffs_bwd_token_kernel<cap.value, exact.value><<<grid_for(N, kGroupsPerBlock<cap.value>), kGroupThreads, 0, s>>>(
        dproj.data<float>(), dr.data<float>(), dh.data<float>(), dh_pre.data<float>(), dh_post.data<float>(),
        dh_res.data<float>(), r.data<float>(), proj.data<float>(), alphas, bias.data<float>(), N, int(n),
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
      dbias.data<float>(), dalphas, partial.data<float>(), chunks, int(n));
  check_launch("coeffs_param_combine_kernel");
}

}  // namespace hytra::cuda
