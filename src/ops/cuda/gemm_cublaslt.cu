// GEMM through cuBLASLt: C = alpha * op(A) @ op(B) + beta * C on row-major tensors (ops.h).
// cuBLASLt is column-major, and a row-major [r, c] matrix is the column-major [c, r] one, so the
// row-major product is computed as its transpose: C^T (N x M, ld N) = op(B)^T @ op(A)^T. cuBLASLt's
// "A" is therefore our B and its "B" our A, each keeping its own transpose flag.
// Types: fp32 x fp32 -> fp32; bf16 x bf16 -> bf16 or fp32; compute in strict fp32
// (CUBLAS_COMPUTE_32F, no TF32), scale type fp32. 3-D tensors are strided batches.
// Each host thread keeps its own cuBLASLt handle, a 32 MiB workspace per stream, and the
// algorithm chosen for each problem (shape, types, flags, pointer alignment): the heuristic's
// first answer, looked up once, so a given problem always runs the same kernel (deterministic).
#include <cublasLt.h>

#include <array>
#include <map>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void lt_check(cublasStatus_t status, const char* what) {
  HYTRA_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuBLASLt error in ", what, ": ", cublasGetStatusString(status));
}
#define HYTRA_LT_CHECK(call) lt_check((call), #call)

// m, n, k, batch, trans_a, trans_b, ab type, c type, alignment of A, B, C in bytes.
using GemmKey = std::array<int64_t, 11>;

struct LtThreadState {
  cublasLtHandle_t handle = nullptr;
  std::map<cudaStream_t, void*> workspaces;
  std::map<GemmKey, cublasLtMatmulAlgo_t> algos;

  LtThreadState() { HYTRA_LT_CHECK(cublasLtCreate(&handle)); }
  ~LtThreadState() {  // at thread exit; errors are ignored (the context may already be gone)
    for (auto& [stream, ws] : workspaces) (void)cudaFree(ws);
    (void)cublasLtDestroy(handle);
  }
  void* workspace(cudaStream_t stream) {
    void*& ws = workspaces[stream];
    if (ws == nullptr) HYTRA_CUDA_CHECK(cudaMalloc(&ws, kWorkspaceBytes));
    return ws;
  }
};

LtThreadState& lt_state() {
  thread_local LtThreadState state;
  return state;
}

// Descriptor owners, so an error thrown midway leaks nothing.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() { if (d) cublasLtMatmulPreferenceDestroy(d); }
};

// Column-major rows x cols with leading dimension ld; for batch > 1 consecutive matrices.
void make_layout(Layout& l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch) {
  HYTRA_LT_CHECK(cublasLtMatrixLayoutCreate(&l.d, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = int32_t(batch);
    int64_t stride = rows * cols;
    HYTRA_LT_CHECK(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    HYTRA_LT_CHECK(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof(stride)));
  }
}

// Largest power of two (<= 256) dividing the address: what the chosen kernel may assume.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

cudaDataType_t lt_type(DType t) {
  HYTRA_ASSERT(t == DType::F32 || t == DType::BF16, "cuBLASLt gemm dtype ", dtype_name(t));
  return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

}  // namespace

void gemm(Exec& ex, Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, float alpha,
          float beta) {
  HYTRA_CHECK((A.dtype() == DType::F32 && C.dtype() == DType::F32) ||
                  (A.dtype() == DType::BF16 && (C.dtype() == DType::BF16 || C.dtype() == DType::F32)),
              "gemm on CUDA: unsupported dtypes A ", A.desc(), ", C ", C.desc());
  const int64_t o = A.dim() - 2;
  const int64_t batch = o == 1 ? A.size(0) : 1;
  const int64_t M = C.size(o), N = C.size(o + 1);
  const int64_t K = trans_a ? A.size(o) : A.size(o + 1);
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // cuBLASLt needs k >= 1; the product is empty (beta 0: C is not read)
    if (beta == 0.0f)
      fill(ex, C, 0.0);
    else
      scale(ex, C, beta);
    return;
  }
  cudaStream_t stream = stream_of(ex);
  LtThreadState& st = lt_state();

  const cudaDataType_t ab_type = lt_type(A.dtype()), c_type = lt_type(C.dtype());
  MatmulDesc op;
  HYTRA_LT_CHECK(cublasLtMatmulDescCreate(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A is our B, its B our A (see the file header).
  cublasOperation_t lt_ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t lt_tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  HYTRA_LT_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &lt_ta, sizeof(lt_ta)));
  HYTRA_LT_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &lt_tb, sizeof(lt_tb)));

  Layout la, lb, lc;
  // Our B: [K,N] row-major = col-major N x K (ld N); with trans_b [N,K] = col-major K x N (ld K).
  if (trans_b)
    make_layout(la, ab_type, K, N, K, batch);
  else
    make_layout(la, ab_type, N, K, N, batch);
  // Our A: [M,K] row-major = col-major K x M (ld K); with trans_a [K,M] = col-major M x K (ld M).
  if (trans_a)
    make_layout(lb, ab_type, M, K, M, batch);
  else
    make_layout(lb, ab_type, K, M, K, batch);
  make_layout(lc, c_type, N, M, N, batch);

  const uint32_t align_a = alignment_of(B.raw()), align_b = alignment_of(A.raw()), align_c = alignment_of(C.raw());
  const GemmKey key{M, N, K, batch, trans_a, trans_b, int64_t(ab_type), int64_t(c_type), align_a, align_b, align_c};
  auto it = st.algos.find(key);
  if (it == st.algos.end()) {
    Preference pref;
    HYTRA_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
    uint64_t ws = kWorkspaceBytes;
    HYTRA_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                        sizeof(ws)));
    HYTRA_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                        &align_a, sizeof(align_a)));
    HYTRA_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                        &align_b, sizeof(align_b)));
    HYTRA_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                        &align_c, sizeof(align_c)));
    HYTRA_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                        &align_c, sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    HYTRA_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(st.handle, op.d, la.d, lb.d, lc.d, lc.d, pref.d, 1, &result,
                                                  &found));
    HYTRA_CHECK(found > 0, "gemm on CUDA: cuBLASLt has no algorithm for M=", M, " N=", N, " K=", K,
                " batch=", batch, " A ", A.desc(), " C ", C.desc());
    it = st.algos.emplace(key, result.algo).first;
  }
  HYTRA_LT_CHECK(cublasLtMatmul(st.handle, op.d, &alpha, B.raw(), la.d, A.raw(), lb.d, &beta, C.raw(), lc.d,
                                C.raw(), lc.d, &it->second, st.workspace(stream), kWorkspaceBytes, stream));
}

}  // namespace hytra::cuda
