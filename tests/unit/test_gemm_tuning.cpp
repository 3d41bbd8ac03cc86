// The CUDA GEMM tuning (ops/gemm_choice.h) changes speed only: on shapes and scalings like those of
// a training step, the tuned output is bitwise the output of cuBLASLt's first pick.
#include <gtest/gtest.h>

#include <cstring>

#include "core/device.h"
#include "ops/gemm_choice.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct Problem {
  int64_t m, n, k;
  bool ta, tb;
  DType ab, c;
  float beta;
};

// Normal inputs drawn on the GPU (the shapes are large enough to be tuned).
Tensor random_on_gpu(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::CUDA);
  ops::random_normal(Exec::cuda(), t, seed, 0, 0.0, 1.0);
  return t;
}

Tensor run_gemm(const Problem& p, uint64_t seed) {
  const Shape a_shape = p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k};
  const Shape b_shape = p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n};
  Tensor A = random_on_gpu(a_shape, p.ab, seed);
  Tensor B = random_on_gpu(b_shape, p.ab, seed + 1);
  Tensor C = random_on_gpu({p.m, p.n}, p.c, seed + 2);
  ops::gemm(Exec::cuda(), C, A, B, p.ta, p.tb, 1.0f, p.beta);
  return C.to(Device::CPU);
}

TEST(GemmTuningCuda, TunedOutputIsBitwiseTheFirstPicks) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Problem problems[] = {
      {4096, 4096, 2048, false, true, DType::BF16, DType::BF16, 0.0f},  // a Linear's forward
      {4096, 2048, 4096, false, false, DType::BF16, DType::BF16, 0.0f},  // its input gradient
      {2048, 2048, 4096, true, false, DType::BF16, DType::F32, 0.0f},    // its first weight gradient
      {2048, 2048, 4096, true, false, DType::BF16, DType::F32, 1.0f},    // ... accumulated
      {2048, 2048, 4096, false, true, DType::F32, DType::F32, 0.0f},     // fp32
  };
  const int64_t compared_before = ops::gemm_candidates_compared();
  uint64_t seed = 11;
  for (const Problem& p : problems) {
    ops::forget_gemm_algorithms();
    ops::set_gemm_tuning(false);
    const Tensor first = run_gemm(p, seed);
    ops::forget_gemm_algorithms();
    ops::set_gemm_tuning(true);
    const Tensor tuned = run_gemm(p, seed);
    ASSERT_EQ(first.nbytes(), tuned.nbytes());
    EXPECT_EQ(std::memcmp(first.raw(), tuned.raw(), first.nbytes()), 0)
        << "m " << p.m << " n " << p.n << " k " << p.k << " beta " << p.beta;
    seed += 3;
  }
  // The tuning ran: some candidates were compared with a first pick (else this test shows nothing).
  EXPECT_GT(ops::gemm_candidates_compared(), compared_before);
  ops::forget_gemm_algorithms();
}

}  // namespace
}  // namespace hytra
