// Embedding lookup and its gradient (ops.h "embedding").
// Forward: y[n,:] = table[ids[n],:], one thread per output element (an id outside [0,V) gives NaN).
// Backward, deterministic without atomics: block (v, channel tile) owns dtable[v, tile] and scans
// ids in order, kThreads ids at a time; a chunk with no match is skipped after one
// __syncthreads_or, otherwise the matching rows (from per-warp ballots) are added in index order,
// so dtable[v,c] += dy[n0,c]; += dy[n1,c]; ... exactly as the sequential loop does.
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void embedding_fwd_kernel(void* y, const int32_t* ids, const void* table, DType t, int64_t N,
                                     int64_t C, int64_t V) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t id = ids[n];
    store_f(y, t, i, (id >= 0 && id < V) ? load_f(table, t, id * C + c) : __int_as_float(0x7fc00000));
  }
}

__global__ void __launch_bounds__(kThreads) embedding_bwd_kernel(void* dtable, DType dtt, const void* dy, DType dyt,
                                                                 const int32_t* ids, int64_t N, int64_t C) {
  __shared__ unsigned masks[kWarps];
  const int64_t v = blockIdx.x;
  const int64_t c = blockIdx.y * int64_t(kThreads) + threadIdx.x;
  const bool has_c = c < C;
  float acc = has_c ? load_f(dtable, dtt, v * C + c) : 0.0f;
  bool touched = false;
  for (int64_t n0 = 0; n0 < N; n0 += kThreads) {
    const int64_t n = n0 + threadIdx.x;
    const bool match = n < N && ids[n] == v;
    if (!__syncthreads_or(match)) continue;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (threadIdx.x % 32 == 0) masks[threadIdx.x / 32] = ballot;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {
      for (unsigned m = masks[w]; m != 0; m &= m - 1) {
        const int64_t row = n0 + w * 32 + (__ffs(int(m)) - 1);
        if (has_c) acc += load_f(dy, dyt, row * C + c);
      }
    }
    touched = true;
    __syncthreads();  // masks is rewritten by the next matching chunk
  }
  if (touched && has_c) store_f(dtable, dtt, v * C + c, acc);
}

}  // namespace

void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table) {
  HYTRA_CHECK(table.dtype() == DType::F32 || table.dtype() == DType::BF16, "embedding_fwd on CUDA: unsupported dtype ",
              table.desc());
  const int64_t N = ids.numel(), C = table.size(1), V = table.size(0);
  if (N * C == 0) return;
  embedding_fwd_kernel<<<grid_for(N * C, kThreads), kThreads, 0, stream_of(ex)>>>(
      y.raw(), ids.data<int32_t>(), table.raw(), table.dtype(), N, C, V);
  check_launch("embedding_fwd_kernel");
}

void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dtable, &dy})
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, "embedding_bwd on CUDA: unsupported dtype ",
                t->desc());
  const int64_t N = ids.numel(), C = dtable.size(1), V = dtable.size(0);
  if (N == 0 || C == 0 || V == 0) return;
  const int64_t tiles = (C + kThreads - 1) / kThreads;
  HYTRA_CHECK(V < (int64_t(1) << 31) && tiles <= 65535, "embedding_bwd on CUDA: table too large ", dtable.desc());
  const dim3 grid{unsigned(V), unsigned(tiles)};
  embedding_bwd_kernel<<<grid, kThreads, 0, stream_of(ex)>>>(dtable.raw(), dtable.dtype(), dy.raw(), dy.dtype(),
                                                             ids.data<int32_t>(), N, C);
  check_launch("embedding_bwd_kernel");
}

}  // namespace hytra::cuda
