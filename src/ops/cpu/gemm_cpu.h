// Raw-pointer GEMM for CPU ops that work on plain host buffers (e.g. the LM-head cross-entropy),
// the same kernel as cpu::gemm. Matrices are row-major with leading dimensions (elements between
// consecutive rows):
//   C = alpha * op(A) @ op(B) + beta * C,   C is M x N (ldc >= N);
//   op(A) = A, A is M x K (lda >= K)   or, with trans_a, A^T for A K x M (lda >= M);
//   op(B) = B, B is K x N (ldb >= N)   or, with trans_b, B^T for B N x K (ldb >= K).
// beta == 0 never reads C (it may hold garbage). Every C element is the sum over k = 0..K-1 in
// order, accumulated in fp32 (gemm_f32) or fp64 (gemm_f64), so results do not depend on the
// thread count or tiling. Threaded over output tiles; runs inline when called inside parallel_for.
#pragma once
#include <cstdint>

namespace hytra::cpu {

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
              int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

}  // namespace hytra::cpu
