// The experts' grouped GEMMs on CUDA (ops.def grouped_gemm*). bf16 on an sm_90a build and device with sizes
// the TMA can describe (multiples of 8, 16-byte aligned buffers, at most 256 groups; fused GLU: an interleave
// that divides 128 or is a multiple of it) runs the Hopper kernel (grouped_gemm_sm90.cu); anything else (fp32
// runs, other devices, other sizes, HYTRA_PORTABLE_KERNELS=1) runs the portable tiled kernels below, each output's
// products summed in reduction order in fp32: slower (a bf16 run says so once), exact in its order, and also free
// of host synchronisation. Rows from offsets[E] on belong to no group and are left as they are.
#include "core/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/grouped_gemm_sm90.h"

namespace hytra::cuda {
namespace {

// The portable kernels: 64 x 64 output tiles, 256 threads of 4 x 4 outputs each, operands staged through shared
// memory in fp32, 16 along the reduction at a time. Each output sums its products in reduction order (K, or the
// group's rows for wgrad) in fp32.
constexpr int kTile = 64, kStep = 16, kThreads = 256;

// Forward / dgrad: y[r,n] = sum_k a[r,k] w_e(n,k), w_e(n,k) = w[e,n,k] (trans_w) or w[e,k,n]. Block x takes the
// x-th row tile counting each group's tiles in turn (at most R / 64 + E of them; the blocks past the last exit),
// block y a column tile.
__global__ void __launch_bounds__(kThreads)
    grouped_gemm_tiled(void* y, const void* a, const void* w, const int32_t* offsets, DType dt, int E, int64_t N,
                       int64_t K, bool trans_w) {
  __shared__ float as[kStep][kTile], bs[kStep][kTile];
  __shared__ int64_t row0, row_end;
  __shared__ int group;
  if (threadIdx.x == 0) {
    int64_t t = blockIdx.x;
    group = -1;
    for (int e = 0; e < E && group < 0; ++e) {
      const int64_t tiles = (int64_t(offsets[e + 1]) - offsets[e] + kTile - 1) / kTile;
      if (t < tiles) group = e, row0 = offsets[e] + t * kTile, row_end = offsets[e + 1];
      t -= tiles;
    }
  }
  __syncthreads();
  if (group < 0) return;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t n0 = int64_t(blockIdx.y) * kTile, we = int64_t(group) * N * K;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    for (int i = threadIdx.x; i < kTile * kStep; i += kThreads) {
      const int r = i / kStep, kk = i % kStep;
      const int64_t row = row0 + r, k = k0 + kk;
      as[kk][r] = row < row_end && k < K ? load_f(a, dt, row * K + k) : 0.0f;
      // (w's element order: along k for w[e,n,k], along n for w[e,k,n])
      const int c = trans_w ? i / kStep : i % kTile, kb = trans_w ? i % kStep : i / kTile;
      const int64_t n = n0 + c, kw = k0 + kb;
      bs[kb][c] = n < N && kw < K ? load_f(w, dt, we + (trans_w ? n * K + kw : kw * N + n)) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kStep; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += as[kk][ty * 4 + i] * bs[kk][tx * 4 + j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t row = row0 + ty * 4 + i, n = n0 + tx * 4 + j;
      if (row < row_end && n < N) store_f(y, dt, row * N + n, acc[i][j]);
    }
}

// dw[e,n,k] = beta dw[e,n,k] + sum over group e's rows r, in order, of dy[r,n] x[r,k]. Block x: a 64 x 64 tile of
// (n, k); block y: the group.
__global__ void __launch_bounds__(kThreads)
    grouped_wgrad_tiled(float* dw, const void* dy, const void* x, const int32_t* offsets, DType dt, int64_t R,
                        int64_t N, int64_t K, float beta) {
  __shared__ float ds[kStep][kTile], xs[kStep][kTile];
  const int64_t e = blockIdx.y, k_tiles = (K + kTile - 1) / kTile;
  const int64_t n0 = int64_t(blockIdx.x) / k_tiles * kTile, k0 = int64_t(blockIdx.x) % k_tiles * kTile;
  const int64_t begin = offsets[e], end = offsets[e + 1] < R ? offsets[e + 1] : R;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t r0 = begin; r0 < end; r0 += kStep) {
    for (int i = threadIdx.x; i < kTile * kStep; i += kThreads) {
      const int rr = i / kTile, c = i % kTile;
      const int64_t r = r0 + rr, n = n0 + c, k = k0 + c;
      ds[rr][c] = r < end && n < N ? load_f(dy, dt, r * N + n) : 0.0f;
      xs[rr][c] = r < end && k < K ? load_f(x, dt, r * K + k) : 0.0f;
    }
    __syncthreads();
    for (int rr = 0; rr < kStep; ++rr)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += ds[rr][ty * 4 + i] * xs[rr][tx * 4 + j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + ty * 4 + i, k = k0 + tx * 4 + j;
      if (n >= N || k >= K) continue;
      float& out = dw[(e * N + n) * K + k];
      out = beta == 0.0f ? acc[i][j] : beta * out + acc[i][j];
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
  if (!warned)
    log_warn(
        "grouped GEMM: bf16 experts of these sizes (or on this device, or with HYTRA_PORTABLE_KERNELS=1) run on the "
        "portable CUDA kernels (slower than the Hopper one)");
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
  const dim3 grid(unsigned((R + kTile - 1) / kTile + E), unsigned((N + kTile - 1) / kTile));
  grouped_gemm_tiled<<<grid, kThreads, 0, stream_of(ex)>>>(y.raw(), a.raw(), w.raw(), offsets.data<int32_t>(),
                                                           a.dtype(), int(E), N, K, trans_w);
  check_launch("grouped_gemm_tiled");
}

void grouped_gemm_wgrad(Exec& ex, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets, float beta) {
  const int64_t R = x.size(0), E = dw.size(0), N = dw.size(1), K = dw.size(2);
  if (dw.numel() == 0) return;
  GroupedGemmArgs g = args(GroupedMode::Wgrad, offsets, E, R, N, K, dy, x, dw.raw());
  g.beta = beta;
  if (R > 0 && use_sm90(x, g, N, K)) return grouped_gemm_sm90(g, ex.stream());
  const dim3 grid(unsigned(((N + kTile - 1) / kTile) * ((K + kTile - 1) / kTile)), unsigned(E));
  grouped_wgrad_tiled<<<grid, kThreads, 0, stream_of(ex)>>>(dw.data<float>(), dy.raw(), x.raw(),
                                                            offsets.data<int32_t>(), x.dtype(), R, N, K, beta);
  check_launch("grouped_wgrad_tiled");
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
