// CPU GEMM (src/ops/cpu/gemm.cpp, gemm_cpu.h) against a naive fp64 triple loop: odd shapes, all
// transposes, batched, alpha/beta, fp32/fp64/bf16; exact results on small integers; bitwise
// repeatability and independence from the tiling; dispatch errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "core/error.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct Dims {
  int64_t batch, M, N, K;  // batch 0 = 2-D
};

Shape with_batch(const Dims& d, int64_t r, int64_t c) { return d.batch ? Shape{d.batch, r, c} : Shape{r, c}; }
Shape a_shape(const Dims& d, bool ta) { return ta ? with_batch(d, d.K, d.M) : with_batch(d, d.M, d.K); }
Shape b_shape(const Dims& d, bool tb) { return tb ? with_batch(d, d.N, d.K) : with_batch(d, d.K, d.N); }

// want = alpha * op(A) @ op(B) + beta * C0 in fp64 (C0 ignored when beta == 0).
Tensor naive_gemm(const Dims& d, const Tensor& A, const Tensor& B, const Tensor& C0, bool ta, bool tb, double alpha,
                  double beta) {
  auto a = A.to_f64_vector(), b = B.to_f64_vector(), c0 = C0.to_f64_vector();
  int64_t nb = d.batch ? d.batch : 1;
  std::vector<double> c(size_t(nb * d.M * d.N));
  for (int64_t s = 0; s < nb; ++s)
    for (int64_t i = 0; i < d.M; ++i)
      for (int64_t j = 0; j < d.N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < d.K; ++k) {
          double av = ta ? a[size_t(s * d.K * d.M + k * d.M + i)] : a[size_t(s * d.M * d.K + i * d.K + k)];
          double bv = tb ? b[size_t(s * d.N * d.K + j * d.K + k)] : b[size_t(s * d.K * d.N + k * d.N + j)];
          acc += av * bv;
        }
        size_t o = size_t(s * d.M * d.N + i * d.N + j);
        c[o] = alpha * acc + (beta != 0 ? beta * c0[o] : 0.0);
      }
  Tensor want = Tensor::empty(with_batch(d, d.M, d.N), DType::F64);
  want.copy_from_f64(c);
  return want;
}

// The dtype's tolerance, widened for the K-term accumulation (error grows ~ sqrt(K) for random data).
test::Tolerance gemm_tol(DType c, int64_t K) {
  test::Tolerance t = test::tol_for(c);
  t.atol *= std::sqrt(double(std::max<int64_t>(K, 1)));
  return t;
}

// Runs every transpose combination and two (alpha, beta) pairs for one dtype set.
void check_gemm(const Dims& d, DType ab, DType cd, uint64_t seed) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.75f, -1.5f}}) {
        SCOPED_TRACE(testing::Message() << "batch=" << d.batch << " M=" << d.M << " N=" << d.N << " K=" << d.K
                                        << " ta=" << ta << " tb=" << tb << " beta=" << beta << " A "
                                        << dtype_name(ab) << " C " << dtype_name(cd));
        Tensor A = test::random_uniform(a_shape(d, ta), ab, seed++);
        Tensor B = test::random_uniform(b_shape(d, tb), ab, seed++);
        Tensor C = test::random_uniform(with_batch(d, d.M, d.N), cd, seed++);
        if (beta == 0.0f) ops::fill(Exec::cpu(), C, std::numeric_limits<double>::quiet_NaN());  // must not be read
        Tensor want = naive_gemm(d, A, B, C, ta, tb, alpha, beta);
        ops::gemm(Exec::cpu(), C, A, B, ta, tb, alpha, beta);
        EXPECT_TRUE(test::all_close(C, want, gemm_tol(cd, d.K)));
      }
}

const std::vector<Dims> kShapes2d = {{0, 1, 1, 1},    {0, 7, 33, 100},  {0, 33, 7, 1},
                                     {0, 100, 65, 257}, {0, 129, 300, 17}, {0, 1, 260, 33}};

TEST(CpuGemm, Fp32OddShapesAllTransposes) {
  uint64_t seed = 100;
  for (const Dims& d : kShapes2d) check_gemm(d, DType::F32, DType::F32, seed += 50);
}

TEST(CpuGemm, Fp64OddShapesAllTransposes) {
  uint64_t seed = 1100;
  for (const Dims& d : kShapes2d) check_gemm(d, DType::F64, DType::F64, seed += 50);
}

TEST(CpuGemm, Bf16InputsFp32AndBf16Output) {
  uint64_t seed = 2100;
  for (const Dims& d : {Dims{0, 7, 33, 100}, Dims{0, 130, 9, 300}, Dims{2, 17, 40, 5}}) {
    check_gemm(d, DType::BF16, DType::F32, seed += 50);
    check_gemm(d, DType::BF16, DType::BF16, seed += 50);
  }
}

TEST(CpuGemm, BatchedAllTransposes) {
  uint64_t seed = 3100;
  for (const Dims& d : {Dims{1, 5, 6, 7}, Dims{3, 33, 17, 100}, Dims{4, 140, 1, 9}}) {
    check_gemm(d, DType::F32, DType::F32, seed += 50);
    check_gemm(d, DType::F64, DType::F64, seed += 50);
  }
}

// Small integers: every product and partial sum is exact in fp32, so the result must equal the
// fp64 reference exactly (the CUTLASS trick).
TEST(CpuGemm, SmallIntegersExact) {
  Dims d{2, 70, 300, 520};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Tensor A = test::random_uniform(a_shape(d, ta), DType::F64, 4100 + ta, -4, 4);
      Tensor B = test::random_uniform(b_shape(d, tb), DType::F64, 4200 + tb, -4, 4);
      for (Tensor* t : {&A, &B}) {
        auto v = t->to_f64_vector();
        for (double& x : v) x = std::floor(x);
        t->copy_from_f64(v);
      }
      Tensor A32 = Tensor::empty(A.shape(), DType::F32), B32 = Tensor::empty(B.shape(), DType::F32);
      A32.copy_from(A.to_f32_vector());
      B32.copy_from(B.to_f32_vector());
      Tensor C = Tensor::empty(with_batch(d, d.M, d.N), DType::F32);
      ops::gemm(Exec::cpu(), C, A32, B32, ta, tb, 1.0f, 0.0f);
      EXPECT_TRUE(test::all_close(C, naive_gemm(d, A, B, C, ta, tb, 1.0, 0.0), {0.0, 0.0}))
          << "ta=" << ta << " tb=" << tb;
    }
}

// Several output tiles and K blocks: a second call is bitwise identical, and computing a row/column
// sub-block on its own (different tile boundaries) gives the same bits.
TEST(CpuGemm, BitwiseRepeatableAndTilingIndependent) {
  const int64_t M = 300, N = 600, K = 530;
  Tensor A = test::random_uniform({M, K}, DType::F32, 5100);
  Tensor B = test::random_uniform({N, K}, DType::F32, 5101);
  Tensor C1 = Tensor::empty({M, N}, DType::F32), C2 = Tensor::empty({M, N}, DType::F32);
  ops::gemm(Exec::cpu(), C1, A, B, false, true, 1.0f, 0.0f);
  ops::gemm(Exec::cpu(), C2, A, B, false, true, 1.0f, 0.0f);
  EXPECT_TRUE(test::bitwise_equal(C1, C2));

  const int64_t r0 = 37, rows = 101, c0 = 77, cols = 263;
  std::vector<float> sub(size_t(rows * cols));
  cpu::gemm_f32(false, true, rows, cols, K, 1.0f, A.data<float>() + r0 * K, K, B.data<float>() + c0 * K, K, 0.0f,
                sub.data(), cols);
  const float* full = C1.data<float>();
  int64_t differ = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      differ += sub[size_t(i * cols + j)] != full[(r0 + i) * N + c0 + j];
  EXPECT_EQ(differ, 0);
}

// The raw entry with leading dimensions larger than the logical widths: padding is never written.
TEST(CpuGemm, RawEntryLeadingDims) {
  const int64_t M = 45, N = 70, K = 33, lda = M + 3, ldb = K + 5, ldc = N + 7;
  Tensor A = test::random_uniform({K, lda}, DType::F64, 6100);  // trans_a: op(A) = A[:, :M]^T
  Tensor B = test::random_uniform({N, ldb}, DType::F64, 6101);  // trans_b: op(B) = B[:, :K]^T
  Tensor C = test::random_uniform({M, ldc}, DType::F64, 6102);
  auto a = A.to_f64_vector(), b = B.to_f64_vector(), c0 = C.to_f64_vector();
  cpu::gemm_f64(true, true, M, N, K, 2.0, A.data<double>(), lda, B.data<double>(), ldb, 0.5, C.data<double>(), ldc);
  const double* c = C.data<double>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      double want = c0[size_t(i * ldc + j)];
      if (j < N) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += a[size_t(k * lda + i)] * b[size_t(j * ldb + k)];
        want = 2.0 * acc + 0.5 * want;
      }
      ASSERT_NEAR(c[i * ldc + j], want, 1e-12) << "i=" << i << " j=" << j;
    }

  std::vector<float> af(size_t(M * lda), 1.0f), bf(size_t(K * N), 2.0f), cf(size_t(M * ldc), -7.0f);
  cpu::gemm_f32(false, false, M, N, K, 1.0f, af.data(), lda, bf.data(), N, 0.0f, cf.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) ASSERT_EQ(cf[size_t(i * ldc + j)], j < N ? 2.0f * K : -7.0f);
}

TEST(CpuGemm, DispatchRejectsBadInputs) {
  Exec& ex = Exec::cpu();
  Tensor A = Tensor::zeros({4, 5}, DType::F32), B = Tensor::zeros({5, 6}, DType::F32);
  Tensor C = Tensor::zeros({4, 6}, DType::F32);
  ops::gemm(ex, C, A, B, false, false, 1.0f, 0.0f);  // the valid call
  Tensor Cbad = Tensor::zeros({4, 7}, DType::F32);
  EXPECT_THROW(ops::gemm(ex, Cbad, A, B, false, false, 1.0f, 0.0f), Error);
  EXPECT_THROW(ops::gemm(ex, C, A, B, true, false, 1.0f, 0.0f), Error);  // inner dims 4 vs 5
  Tensor Bbf = Tensor::zeros({5, 6}, DType::BF16);
  EXPECT_THROW(ops::gemm(ex, C, A, Bbf, false, false, 1.0f, 0.0f), Error);
  Tensor Cbf = Tensor::zeros({4, 6}, DType::BF16);
  EXPECT_THROW(ops::gemm(ex, Cbf, A, B, false, false, 1.0f, 0.0f), Error);  // bf16 C needs bf16 inputs
  Tensor A3 = Tensor::zeros({2, 4, 5}, DType::F32), B3 = Tensor::zeros({3, 5, 6}, DType::F32);
  Tensor C3 = Tensor::zeros({2, 4, 6}, DType::F32);
  EXPECT_THROW(ops::gemm(ex, C3, A3, B3, false, false, 1.0f, 0.0f), Error);  // batch 2 vs 3
  EXPECT_THROW(ops::gemm(ex, C3, A3, B, false, false, 1.0f, 0.0f), Error);   // 3-D with 2-D
  Tensor Ai = Tensor::zeros({4, 5}, DType::I32), Bi = Tensor::zeros({5, 6}, DType::I32);
  Tensor Ci = Tensor::zeros({4, 6}, DType::I32);
  EXPECT_THROW(ops::gemm(ex, Ci, Ai, Bi, false, false, 1.0f, 0.0f), Error);
}

}  // namespace
}  // namespace hytra
