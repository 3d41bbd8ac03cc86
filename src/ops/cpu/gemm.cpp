// CPU GEMM (ops.h "GEMM"): C = alpha * op(A) @ op(B) + beta * C, 2-D or batched 3-D.
// dtypes (A/B -> C): fp32 -> fp32, fp64 -> fp64 (fp64 accumulation), bf16 -> fp32 or bf16
// (inputs widened to fp32, fp32 accumulation, one rounding to bf16 at the end).
//
// Cache-blocked: the output is cut into MC x NC tiles, one parallel_for task per tile (and batch).
// A task walks K in KC blocks, packing op(A) into MR-row panels and op(B) into NR-column panels
// (contiguous, converted to the accumulation type, zero-padded at the edges), and runs an MR x NR
// register-tile micro-kernel over them. The micro-kernel reloads its partial sums from the tile
// buffer, so every element is summed over k = 0..K-1 in order: the result does not depend on the
// blocking or the thread count.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm_cpu.h"

namespace hytra::cpu {
namespace {

constexpr int64_t MR = 4, NR = 8;                // register tile
constexpr int64_t MC = 128, NC = 256, KC = 256;  // cache tile (MC % MR == 0, NC % NR == 0)

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_float(x); }
inline double widen(double x) { return x; }
inline void narrow(float& d, float v) { d = v; }
inline void narrow(bf16& d, float v) { d = float_to_bf16(v); }
inline void narrow(double& d, double v) { d = v; }

// One batch of row-major matrices; stride_* is the distance between batch entries.
template <class T, class TC>
struct GemmArgs {
  int64_t batch, M, N, K;
  const T* A;
  int64_t lda, stride_a;
  bool trans_a;
  const T* B;
  int64_t ldb, stride_b;
  bool trans_b;
  TC* C;
  int64_t ldc, stride_c;
  double alpha, beta;
};

// dst (ceil(mc/MR) panels, each kc x MR) <- op(A)[i0:i0+mc, k0:k0+kc].
template <class T, class Acc>
void pack_a(Acc* dst, const T* a, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
  for (int64_t p = 0; p < mc; p += MR, dst += kc * MR) {
    int64_t rows = std::min(MR, mc - p);
    for (int64_t r = 0; r < MR; ++r) {
      int64_t i = i0 + p + r;
      for (int64_t k = 0; k < kc; ++k)
        dst[k * MR + r] = r >= rows ? Acc(0) : widen(trans ? a[(k0 + k) * lda + i] : a[i * lda + k0 + k]);
    }
  }
}

// dst (ceil(nc/NR) panels, each kc x NR) <- op(B)[k0:k0+kc, j0:j0+nc].
template <class T, class Acc>
void pack_b(Acc* dst, const T* b, int64_t ldb, bool trans, int64_t j0, int64_t nc, int64_t k0, int64_t kc) {
  for (int64_t q = 0; q < nc; q += NR, dst += kc * NR) {
    int64_t cols = std::min(NR, nc - q);
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t c = 0; c < NR; ++c) {
        int64_t j = j0 + q + c;
        dst[k * NR + c] = c >= cols ? Acc(0) : widen(trans ? b[j * ldb + k0 + k] : b[(k0 + k) * ldb + j]);
      }
  }
}

// c (MR x NR, row stride ldc) += a-panel (kc x MR) @ b-panel (kc x NR), k in order.
template <class Acc>
void micro_kernel(int64_t kc, const Acc* __restrict a, const Acc* __restrict b, Acc* __restrict c, int64_t ldc) {
  Acc acc[MR][NR];
#pragma GCC unroll 8
  for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int64_t j = 0; j < NR; ++j) acc[r][j] = c[r * ldc + j];
  for (int64_t k = 0; k < kc; ++k, a += MR, b += NR) {
#pragma GCC unroll 8
    for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int64_t j = 0; j < NR; ++j) acc[r][j] += a[r] * b[j];
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int64_t j = 0; j < NR; ++j) c[r * ldc + j] = acc[r][j];
}

template <class T, class TC>
void run_gemm(const GemmArgs<T, TC>& g) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t tiles_m = (g.M + MC - 1) / MC, tiles_n = (g.N + NC - 1) / NC;
  const Acc alpha = Acc(g.alpha), beta = Acc(g.beta);
  parallel_for(g.batch * tiles_m * tiles_n, 1, [&](int64_t t0, int64_t t1) {
    // Packed A, packed B and the tile sums (MC,NC): per-thread buffers reused across calls, so a
    // small GEMM costs no allocation (a fresh 1 MB vector per call dominated tiny-layer steps).
    thread_local std::vector<Acc> pa(MC * KC), pb(KC * NC), tile(MC * NC);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / (tiles_m * tiles_n), i0 = (t / tiles_n % tiles_m) * MC, j0 = (t % tiles_n) * NC;
      const int64_t mc = std::min(MC, g.M - i0), nc = std::min(NC, g.N - j0);
      const T* A = g.A + bi * g.stride_a;
      const T* B = g.B + bi * g.stride_b;
      TC* C = g.C + bi * g.stride_c;
      const int64_t rows = (mc + MR - 1) / MR * MR;  // the micro-kernels touch whole MR-row panels
      std::fill(tile.begin(), tile.begin() + rows * NC, Acc(0));
      for (int64_t k0 = 0; k0 < g.K; k0 += KC) {
        const int64_t kc = std::min(KC, g.K - k0);
        pack_a(pa.data(), A, g.lda, g.trans_a, i0, mc, k0, kc);
        pack_b(pb.data(), B, g.ldb, g.trans_b, j0, nc, k0, kc);
        for (int64_t q = 0; q < nc; q += NR)
          for (int64_t p = 0; p < mc; p += MR)
            micro_kernel(kc, pa.data() + p * kc, pb.data() + q * kc, tile.data() + p * NC + q, NC);
      }
      for (int64_t i = 0; i < mc; ++i) {
        TC* crow = C + (i0 + i) * g.ldc + j0;
        const Acc* trow = tile.data() + i * NC;
        if (beta == Acc(0))
          for (int64_t j = 0; j < nc; ++j) narrow(crow[j], alpha * trow[j]);
        else
          for (int64_t j = 0; j < nc; ++j) narrow(crow[j], alpha * trow[j] + beta * widen(crow[j]));
      }
    }
  });
}

template <class T, class TC>
void gemm_tensors(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, float alpha,
                  float beta) {
  const int64_t o = A.dim() - 2;
  GemmArgs<T, TC> g;
  g.batch = o == 1 ? A.size(0) : 1;
  g.M = C.size(o);
  g.N = C.size(o + 1);
  g.K = trans_a ? A.size(o) : A.size(o + 1);
  g.A = A.data<T>();
  g.lda = A.size(o + 1);
  g.stride_a = A.size(o) * A.size(o + 1);
  g.trans_a = trans_a;
  g.B = B.data<T>();
  g.ldb = B.size(o + 1);
  g.stride_b = B.size(o) * B.size(o + 1);
  g.trans_b = trans_b;
  g.C = C.data<TC>();
  g.ldc = g.N;
  g.stride_c = g.M * g.N;
  g.alpha = alpha;
  g.beta = beta;
  run_gemm(g);
}

}  // namespace

void gemm(Exec& ex, Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, float alpha,
          float beta) {
  const DType a = A.dtype(), c = C.dtype();
  if (a == DType::F32 && c == DType::F32)
    gemm_tensors<float, float>(C, A, B, trans_a, trans_b, alpha, beta);
  else if (a == DType::F64 && c == DType::F64)
    gemm_tensors<double, double>(C, A, B, trans_a, trans_b, alpha, beta);
  else if (a == DType::BF16 && c == DType::F32)
    gemm_tensors<bf16, float>(C, A, B, trans_a, trans_b, alpha, beta);
  else if (a == DType::BF16 && c == DType::BF16)
    gemm_tensors<bf16, bf16>(C, A, B, trans_a, trans_b, alpha, beta);
  else
    fail(str("gemm (cpu): unsupported dtypes A ", dtype_name(a), ", C ", dtype_name(c)));
}

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  run_gemm(GemmArgs<float, float>{1, M, N, K, A, lda, 0, trans_a, B, ldb, 0, trans_b, C, ldc, 0, alpha, beta});
}

void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
              int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  run_gemm(GemmArgs<double, double>{1, M, N, K, A, lda, 0, trans_a, B, ldb, 0, trans_b, C, ldc, 0, alpha, beta});
}

}  // namespace hytra::cpu
