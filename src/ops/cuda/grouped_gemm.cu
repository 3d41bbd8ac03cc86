// The experts' grouped GEMMs on CUDA (ops.def grouped_gemm*). bf16 on an sm_90a build and device with sizes
// the TMA can describe (multiples of 8, 16-byte aligned buffers, at most 256 groups; fused GLU: an interleave
// that divides 128 or is a multiple of it) runs the Hopper kernel (grouped_gemm_sm90.cu); anything else (fp32
// runs, other devices, other sizes) runs the plain kernels below, one thread per output element with the
// products summed in K order in fp32: slow (a bf16 run says so once), exact in its order, and also free of
// host synchronisation. Rows from offsets[E] on belong to no group and are left as they are.
#include "core/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/grouped_gemm_sm90.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

// y[r,n] = sum_k a[r,k] w_e(n,k), w_e(n,k) = w[e,n,k] (trans_w) or w[e,k,n].
__global__ void grouped_gemm_simt(void* y, const void* a, const void* w, const int32_t* offsets, DType dt, int E,
                                  int64_t R, int64_t N, int64_t K, bool trans_w) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / N, n = i % N;
    if (r >= offsets[E]) continue;
    const int64_t we = int64_t(last_at_most(offsets, E, r)) * N * K;  // r's group (empty ones skipped)
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k)
      acc += load_f(a, dt, r * K + k) * load_f(w, dt, we + (trans_w ? n * K + k : k * N + n));
    store_f(y, dt, i, acc);
  }
}

// dw[e,n,k] = beta dw[e,n,k] + sum over group e's rows r of dy[r,n] x[r,k].
__global__ void grouped_wgrad_simt(float* dw, const void* dy, const void* x, const int32_t* offsets, DType dt,
                                   int64_t R, int64_t E, int64_t N, int64_t K, float beta) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < E * N * K;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i / (N * K), n = i / K % N, k = i % K;
    float acc = 0.0f;
    const int64_t end = offsets[e + 1] < R ? offsets[e + 1] : R;
    for (int64_t r = offsets[e]; r < end; ++r) acc += load_f(dy, dt, r * N + n) * load_f(x, dt, r * K + k);
    dw[i] = beta == 0.0f ? acc : beta * dw[i] + acc;
  }
}

GroupedGemmArgs args(GroupedMode mode, const Tensor& offsets, int64_t E, int64_t R, int64_t N, int64_t K,
                     const Tensor& a, const Tensor& b, void* y) {
  GroupedGemmArgs g{};
  g.mode = mode;
  g.offsets = offsets.data<int32_t>();
  g.E = int(E);
  g.R = R;
  g.N = int(N);
  g.K = int(K);
  g.a = a.raw();
  g.b = b.raw();
  g.y = y;
  return g;
}

bool use_sm90(const Tensor& a, const GroupedGemmArgs& g, int64_t N, int64_t K) {
  if (a.dtype() != DType::BF16) return false;
  if (N < (int64_t(1) << 31) && K < (int64_t(1) << 31) && grouped_gemm_sm90_fits(g)) return true;
  static bool warned = false;
  if (!warned) log_warn("grouped GEMM: bf16 experts of these sizes (or this device) run on the slow plain CUDA kernel");
  warned = true;
  return false;
}

}  // namespace

void grouped_gemm(Exec& ex, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets, bool trans_w) {
  const int64_t R = a.size(0), K = a.size(1), N = y.size(1), E = w.size(0);
  if (R == 0 || N == 0) return;
  const GroupedGemmArgs g =
      args(trans_w ? GroupedMode::Forward : GroupedMode::Dgrad, offsets, E, R, N, K, a, w, y.raw());
  if (use_sm90(a, g, N, K)) return grouped_gemm_sm90(g, ex.stream());
  grouped_gemm_simt<<<grid_for(R * N, kThreads), kThreads, 0, stream_of(ex)>>>(
      y.raw(), a.raw(), w.raw(), offsets.data<int32_t>(), a.dtype(), int(E), R, N, K, trans_w);
  check_launch("grouped_gemm_simt");
}

void grouped_gemm_wgrad(Exec& ex, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets, float beta) {
  const int64_t R = x.size(0), E = dw.size(0), N = dw.size(1), K = dw.size(2);
  if (dw.numel() == 0) return;
  GroupedGemmArgs g = args(GroupedMode::Wgrad, offsets, E, R, N, K, dy, x, dw.raw());
  g.beta = beta;
  if (R > 0 && use_sm90(x, g, N, K)) return grouped_gemm_sm90(g, ex.stream());
  grouped_wgrad_simt<<<grid_for(E * N * K, kThreads), kThreads, 0, stream_of(ex)>>>(
      dw.data<float>(), dy.raw(), x.raw(), offsets.data<int32_t>(), x.dtype(), R, E, N, K, beta);
  check_launch("grouped_wgrad_simt");
}

void grouped_gemm_glu(Exec& ex, Tensor& h, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets,
                      const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset,
                      double clamp) {
  const int64_t R = a.size(0), K = a.size(1), N = h.size(1), E = w.size(0);
  if (R == 0 || N == 0) return;
  GroupedGemmArgs g = args(GroupedMode::Glu, offsets, E, R, N, K, a, w, y.raw());
  g.h = h.raw();
  g.probs = probs.data<float>();
  g.act = act;
  g.I = int(glu_interleave > 0 ? glu_interleave : N / 2);
  g.offset = float(linear_offset);
  g.clamp = float(clamp);
  if (use_sm90(a, g, N, K)) return grouped_gemm_sm90(g, ex.stream());
  cuda::grouped_gemm(ex, h, a, w, offsets, true);
  cuda::moe_act_fwd(ex, y, h, probs, act, glu_interleave, linear_offset, clamp);
}

}  // namespace hytra::cuda
