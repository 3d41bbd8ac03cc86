// The dropless dispatch plan on CUDA (ops.def moe_plan_dropless), a stable counting sort in two kernels:
//   rank: one block per expert e walks all N*K choices, each thread a contiguous segment: its matches
//     counted, an exclusive prefix over the threads (in thread order), then each match's rank among e's
//     choices = the prefix + the matches before it in the segment; the total is e's rows (scratch after
//     the ranks) and is added to counts[e];
//   rows: every block scans the rows into the experts' first rows (shared memory; block 0 also writes
//     them to offsets), then one thread per token places its K choices (row = first row of its expert +
//     rank) and writes its K rows sorted.
// Integer work only: the same plan as the CPU's, every run.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kRankThreads = 1024;
constexpr int kRowThreads = 256;
constexpr int kMaxK = 32;

__global__ void __launch_bounds__(kRankThreads) plan_rank_kernel(const int32_t* top, int64_t NK, int32_t* rank,
                                                                   int32_t* rows, int32_t* counts) {
  __shared__ int32_t warp_total[kRankThreads / 32];
  const int32_t e = int32_t(blockIdx.x);
  const int64_t seg = (NK + kRankThreads - 1) / kRankThreads;
  const int64_t i0 = min(NK, int64_t(threadIdx.x) * seg), i1 = min(NK, i0 + seg);
  int32_t mine = 0;
  for (int64_t i = i0; i < i1; ++i) mine += top[i] == e;
  // Inclusive prefix of `mine` over the block's threads in thread order.
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  int32_t incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  int32_t before = incl - mine;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  for (int64_t i = i0; i < i1; ++i)
    if (top[i] == e) rank[i] = before++;
  if (threadIdx.x == kRankThreads - 1) {
    rows[e] = before;
    counts[e] += before;
  }
}

__global__ void __launch_bounds__(kRowThreads) plan_rows_kernel(const int32_t* top, const int32_t* rank,
                                                                 const int32_t* counts_now, int64_t N, int K, int E,
                                                                 int32_t* offsets, int32_t* row_token,
                                                                 int32_t* row_slot, int32_t* slot_row,
                                                                 int32_t* token_rows) {
  extern __shared__ int32_t first[];  // (E) each expert's first row
  if (threadIdx.x == 0) {
    int32_t acc = 0;
    for (int e = 0; e < E; ++e) {
      first[e] = acc;
      if (blockIdx.x == 0) offsets[e] = acc;
      acc += counts_now[e];
    }
    if (blockIdx.x == 0) offsets[E] = acc;
  }
  __syncthreads();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x) {
    int32_t rows[kMaxK];
    int n = 0;
    for (int j = 0; j < K; ++j) {
      const int64_t i = t * K + j;
      const int32_t e = top[i];
      if (e < 0 || e >= E) continue;  // no row (the op's precondition excludes it)
      const int32_t r = first[e] + rank[i];
      slot_row[i] = r;
      row_token[r] = int32_t(t);
      row_slot[r] = int32_t(i);
      int m = n++;  // insertion into the sorted rows
      for (; m > 0 && rows[m - 1] > r; --m) rows[m] = rows[m - 1];
      rows[m] = r;
    }
    for (int j = 0; j < n; ++j) token_rows[t * K + j] = rows[j];
  }
}

}  // namespace

void moe_plan_dropless(Exec& ex, Tensor& counts, Tensor& offsets, Tensor& row_token, Tensor& row_slot,
                       Tensor& slot_row, Tensor& token_rows, const Tensor& top, int64_t num_experts) {
  const int64_t N = top.size(0), K = top.size(1), NK = top.numel();
  HYTRA_CHECK(K <= kMaxK, "moe_plan_dropless on CUDA: top-k ", K, " (at most ", kMaxK, ")");
  HYTRA_CHECK(num_experts <= 65535 && NK < (int64_t(1) << 31), "moe_plan_dropless on CUDA: ", num_experts,
              " experts and ", NK, " choices (at most 65535 and 2^31)");
  cudaStream_t s = stream_of(ex);
  Tensor rank = Tensor::empty({NK + num_experts}, DType::I32, Device::CUDA);  // ranks, then this call's rows
  int32_t* rows = rank.data<int32_t>() + NK;
  plan_rank_kernel<<<unsigned(num_experts), kRankThreads, 0, s>>>(top.data<int32_t>(), NK, rank.data<int32_t>(),
                                                                  rows, counts.data<int32_t>());
  check_launch("plan_rank_kernel");
  const size_t smem = size_t(num_experts) * sizeof(int32_t);
  allow_smem(&plan_rows_kernel, int64_t(smem), "plan_rows_kernel smem");
  plan_rows_kernel<<<grid_for(N, kRowThreads), kRowThreads, smem, s>>>(
      top.data<int32_t>(), rank.data<int32_t>(), rows, N, int(K), int(num_experts), offsets.data<int32_t>(), row_token.data<int32_t>(), row_slot.data<int32_t>(), slot_row.data<int32_t>(), token_rows.data<int32_t>());
  check_launch("plan_rows_kernel");
}

}  // namespace hytra::cuda
