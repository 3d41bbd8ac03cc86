// How CUDA GEMMs pick their cuBLASLt algorithm (ops/cuda/gemm_cublaslt.cu). cuBLASLt's heuristic
// ranks candidate kernels for a problem; its first pick is 3-9% slower than the best one for some of
// a 1B model's GEMM shapes (bench/NOTES.md). With tuning on (the default), a large problem's first
// call outside graph capture times the top candidates on random inputs of its shapes and keeps the
// fastest whose output is bitwise the first pick's, so results never depend on the timings.
// CPU-only builds run no CUDA GEMMs: there these do nothing.
#pragma once
#include <cstdint>

namespace hytra::ops {

// Turns the tuning on or off for GEMMs issued by this host thread.
void set_gemm_tuning(bool on);
// Forgets the algorithms this host thread chose, so the next call of each problem chooses again.
void forget_gemm_algorithms();
// Candidates this host thread has run and compared against a first pick (for tests).
int64_t gemm_candidates_compared();

}  // namespace hytra::ops
