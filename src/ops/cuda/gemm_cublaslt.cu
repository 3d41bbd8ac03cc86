// GEMM through cuBLASLt: C = alpha * op(A) @ op(B) + beta * C on row-major tensors (ops.h).
// cuBLASLt is column-major, and a row-major [r, c] matrix is the column-major [c, r] one, so the
// row-major product is computed as its transpose: C^T (N x M, ld N) = op(B)^T @ op(A)^T. cuBLASLt's
// "A" is therefore our B and its "B" our A, each keeping its own transpose flag.
// Types: fp32 x fp32 -> fp32; bf16 x bf16 -> bf16 or fp32; compute in strict fp32
// (CUBLAS_COMPUTE_32F, no TF32), scale type fp32. 3-D tensors are strided batches.
// Each host thread keeps its own cuBLASLt handle, a 32 MiB workspace per stream, and the
// algorithm chosen for each problem (shape, types, flags, pointer alignment), looked up once: the
// heuristic's first pick, or with tuning (ops/gemm_choice.h) the fastest candidate whose output is
// bitwise the first pick's. Either way a given problem always gives the same bits (deterministic).
#include <cublasLt.h>

#include <array>
#include <map>

#include "core/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/gemm_choice.h"

namespace hytra::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Tuning: how many of the heuristic's candidates to try, for problems of at least kTuneMinFlops
// (smaller ones cost more to time than they can gain), at most kTuneMaxProblems per thread (MoE
// expert GEMMs meet a new row count nearly every step).
constexpr int kTuneCandidates = 8;
constexpr double kTuneMinFlops = 3.2e10;
constexpr int kTuneMaxProblems = 64;

void lt_check(cublasStatus_t status, const char* what) {
  HYTRA_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuBLASLt error in ", what, ": ", cublasGetStatusString(status));
}
#define HYTRA_LT_CHECK(call) lt_check((call), #call)

// m, n, k, batch, trans_a, trans_b, ab type, c type, alignment of A, B, C in bytes, scaling class.
using GemmKey = std::array<int64_t, 12>;

// Scaling classes: the tuning compares candidates under the call's own alpha and beta, so a choice
// holds only for calls that scale alike. alpha 1 with beta 0 or 1 (every caller in hytra) is tuned;
// any other scaling keeps the heuristic's first pick.
enum ScalingClass : int64_t { kOverwrite = 0, kAccumulate = 1, kOtherScaling = 2 };
ScalingClass scaling_class(float alpha, float beta) {
  if (alpha != 1.0f) return kOtherScaling;
  return beta == 0.0f ? kOverwrite : beta == 1.0f ? kAccumulate : kOtherScaling;
}

struct LtThreadState {
  cublasLtHandle_t handle = nullptr;
  std::map<cudaStream_t, void*> workspaces;
  std::map<GemmKey, cublasLtMatmulAlgo_t> algos;
  bool tuning = true;
  int tuned_problems = 0;
  int64_t candidates_compared = 0;

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

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HYTRA_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Values uniform in [-1, 1) from an integer hash of (i, seed), as bf16 or fp32: tuning inputs.
__global__ void fill_hashed_uniform(void* p, int64_t n, DType t, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    store_f(p, t, i, float(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

void fill_hashed(void* p, int64_t n, DType t, uint32_t seed, cudaStream_t stream) {
  fill_hashed_uniform<<<1024, 256, 0, stream>>>(p, n, t, seed);
  check_launch("fill_hashed_uniform");
}

// Adds to *count the number of 16-bit words where a and b differ.
__global__ void count_differing_words(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(count, local);
}

// Scratch device memory of the tuning, released on scope exit; empty when cudaMalloc fails.
struct DeviceScratch {
  void* p = nullptr;
  explicit DeviceScratch(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
  }
  ~DeviceScratch() { if (p) (void)cudaFree(p); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

// One GEMM problem as cuBLASLt sees it (see gemm() below for the operand swap).
struct LtProblem {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  DType ab, c;
  int64_t a_elems, b_elems, c_elems;  // cuBLASLt's A, B and C
  bool reads_c;                       // alpha 1 and beta 1 (else alpha 1, beta 0)
};

// The tuning (ops/gemm_choice.h): each candidate runs once on hashed inputs and is compared with the
// first pick bitwise; the bitwise-equal ones are timed (one warm-up, three runs) and the fastest,
// when at least 1% faster than the first pick, is kept. Any failure keeps the first pick.
struct TuningResult {
  int chosen = 0;  // index into the candidates
  float first_ms = -1.0f, chosen_ms = -1.0f;
};
TuningResult tune(LtThreadState& st, const LtProblem& p, const cublasLtMatmulHeuristicResult_t* cand, int found,
                  cudaStream_t stream) {
  TuningResult result;
  const size_t ab_size = dtype_size(p.ab), c_bytes = size_t(p.c_elems) * dtype_size(p.c);
  DeviceScratch a(size_t(p.a_elems) * ab_size);
  DeviceScratch b(size_t(p.b_elems) * ab_size);
  DeviceScratch c_first(c_bytes);
  DeviceScratch c_try(c_bytes);
  DeviceScratch count(sizeof(unsigned long long));
  if (!a.p || !b.p || !c_first.p || !c_try.p || !count.p) return result;
  const unsigned grid = 1024, threads = 256;
  fill_hashed(a.p, p.a_elems, p.ab, 1u, stream);
  fill_hashed(b.p, p.b_elems, p.ab, 2u, stream);
  const float one = 1.0f, beta = p.reads_c ? 1.0f : 0.0f;
  void* ws = st.workspace(stream);
  auto run = [&](const cublasLtMatmulAlgo_t& algo, void* c) {
    if (p.reads_c) fill_hashed(c, p.c_elems, p.c, 3u, stream);
    return cublasLtMatmul(st.handle, p.op, &one, a.p, p.la, b.p, p.lb, &beta, c, p.lc, c, p.lc, &algo, ws,
                          kWorkspaceBytes, stream) == CUBLAS_STATUS_SUCCESS;
  };
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    (void)cudaGetLastError();
    if (start) (void)cudaEventDestroy(start);
    return result;
  }
  auto time_ms = [&](const cublasLtMatmulAlgo_t& algo) {
    (void)run(algo, c_try.p);
    (void)cudaEventRecord(start, stream);
    for (int r = 0; r < 3; ++r) (void)run(algo, c_try.p);
    (void)cudaEventRecord(stop, stream);
    float ms = 0.0f;
    if (cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
      return -1.0f;
    return ms / 3;
  };
  result.first_ms = result.chosen_ms = run(cand[0].algo, c_first.p) ? time_ms(cand[0].algo) : -1.0f;
  for (int i = 1; result.first_ms > 0 && i < found; ++i) {
    unsigned long long differing = 1;
    if (cudaMemsetAsync(count.p, 0, sizeof(differing), stream) != cudaSuccess || !run(cand[i].algo, c_try.p)) continue;
    count_differing_words<<<grid, threads, 0, stream>>>(static_cast<const uint16_t*>(c_first.p),
                                                         static_cast<const uint16_t*>(c_try.p), int64_t(c_bytes / 2),
                                                         static_cast<unsigned long long*>(count.p));
    check_launch("count_differing_words");
    if (cudaMemcpyAsync(&differing, count.p, sizeof(differing), cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      break;
    ++st.candidates_compared;
    if (differing != 0) continue;
    const float ms = time_ms(cand[i].algo);
    if (ms > 0 && ms < 0.99f * result.chosen_ms) {
      result.chosen = i;
      result.chosen_ms = ms;
    }
  }
  (void)cudaGetLastError();  // a refused candidate leaves no error behind
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return result;
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
  const ScalingClass scaling = scaling_class(alpha, beta);
  const GemmKey key{M, N, K, batch, trans_a, trans_b, int64_t(ab_type), int64_t(c_type),
                    align_a, align_b, align_c, scaling};
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
    const double flops = 2.0 * double(M) * double(N) * double(K) * double(batch);
    const bool tuned_problem = st.tuning && scaling != kOtherScaling && flops >= kTuneMinFlops &&
                               st.tuned_problems < kTuneMaxProblems && !stream_capturing(stream);
    std::array<cublasLtMatmulHeuristicResult_t, kTuneCandidates> found_algos{};
    int found = 0;
    HYTRA_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(st.handle, op.d, la.d, lb.d, lc.d, lc.d, pref.d,
                                                  tuned_problem ? kTuneCandidates : 1, found_algos.data(), &found));
    HYTRA_CHECK(found > 0, "gemm on CUDA: cuBLASLt has no algorithm for M=", M, " N=", N, " K=", K,
                " batch=", batch, " A ", A.desc(), " C ", C.desc());
    cublasLtMatmulAlgo_t algo = found_algos[0].algo;
    if (tuned_problem && found > 1) {
      ++st.tuned_problems;
      const LtProblem problem{op.d, la.d, lb.d, lc.d, A.dtype(), C.dtype(), K * N * batch, M * K * batch,
                              M * N * batch, scaling == kAccumulate};
      const TuningResult tuned = tune(st, problem, found_algos.data(), found, stream);
      algo = found_algos[size_t(tuned.chosen)].algo;
      if (tuned.chosen != 0)
        log_info(str("cuBLASLt gemm M ", M, " N ", N, " K ", K, " batch ", batch, trans_a ? " A^T" : "",
                     trans_b ? " B^T" : "", ": candidate ", tuned.chosen, " of ", found, ", ", tuned.chosen_ms,
                     " ms against ", tuned.first_ms, " ms for the first pick"));
    }
    it = st.algos.emplace(key, algo).first;
  }
  HYTRA_LT_CHECK(cublasLtMatmul(st.handle, op.d, &alpha, B.raw(), la.d, A.raw(), lb.d, &beta, C.raw(), lc.d,
                                C.raw(), lc.d, &it->second, st.workspace(stream), kWorkspaceBytes, stream));
}

}  // namespace hytra::cuda

namespace hytra::ops {
void set_gemm_tuning(bool on) { cuda::lt_state().tuning = on; }
void forget_gemm_algorithms() {
  cuda::LtThreadState& st = cuda::lt_state();
  st.algos.clear();
  st.tuned_problems = 0;
}
int64_t gemm_candidates_compared() { return cuda::lt_state().candidates_compared; }
}  // namespace hytra::ops
