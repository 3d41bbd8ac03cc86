// The dispatch plans on CUDA (ops.def moe_plan_dropless, moe_plan_capacity). Integer work only: the same plans
// as the CPU's, every run, with no host synchronisation.
// Dropless, a stable counting sort in two kernels:
//   rank: one block per expert e walks all N*K choices, each thread a contiguous segment: its matches
//     counted, an exclusive prefix over the threads (in thread order), then each match's rank among e's
//     choices = the prefix + the matches before it in the segment; the total is e's rows (scratch after
//     the ranks) and is added to counts[e];
//   rows: every block scans the rows into the experts' first rows (shared memory; block 0 also writes
//     them to offsets), then one thread per token places its K choices (row = first row of its expert +
//     rank) and writes its K rows sorted.
// Capacity, with the rank kernel (ranks in token order, routed counts, no count added) and then:
//   select: one block per expert lists its choices in token order and keeps all, the first cap (by
//     position), or those whose rank by probability is below cap (rank = the choices with a higher
//     probability, or an equal one and a lower token: O(count^2)); it sets the expert's row count;
//   rows: one block per expert marks its kept tokens in a shared bitmap, then walks the tokens in order: a
//     kept token or one of the first `pad` free tokens gets the next row. It also writes, per 32 tokens,
//     which of them the expert holds (a word of bits) and the row of the first (so any row is found in O(1));
//   token count, scan, token fill: one thread per token counts its rows (over the experts' words) and kept
//     choices, one block turns them into token_offsets and each token's first kept-choice index, then each
//     token writes its rows (experts in order, so ascending) and its choices' prob CSR;
//   tail: the unused rows and CSR entries get their fixed values.
#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kRankThreads = 1024;
constexpr int kRowThreads = 256;
constexpr int kMaxK = 32;

// Exclusive prefix of v over the block's threads in thread order (kRankThreads of them), and the block's total.
// Every thread must call it.
__device__ int32_t block_scan(int32_t v, int32_t& total) {
  __shared__ int32_t warp_total[kRankThreads / 32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  int32_t incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  int32_t before = incl - v, all = 0;
  for (int w = 0; w < kRankThreads / 32; ++w) {
    if (w < warp) before += warp_total[w];
    all += warp_total[w];
  }
  __syncthreads();  // warp_total is free for the next call
  total = all;
  return before;
}

// counts: null for the capacity plan (it counts the kept tokens instead).
__global__ void __launch_bounds__(kRankThreads) plan_rank_kernel(const int32_t* top, int64_t NK, int32_t* rank,
                                                                   int32_t* rows, int32_t* counts) {
  const int32_t e = int32_t(blockIdx.x);
  const int64_t seg = (NK + kRankThreads - 1) / kRankThreads;
  const int64_t i0 = min(NK, int64_t(threadIdx.x) * seg), i1 = min(NK, i0 + seg);
  int32_t mine = 0, total = 0;
  for (int64_t i = i0; i < i1; ++i) mine += top[i] == e;
  int32_t before = block_scan(mine, total);
  for (int64_t i = i0; i < i1; ++i)
    if (top[i] == e) rank[i] = before++;
  if (threadIdx.x == 0) {
    rows[e] = total;
    if (counts) counts[e] += total;
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

// ---- capacity plan ----

// The sum of x[0..n), computed by the block (every thread gets it).
__device__ int32_t sum_before(const int32_t* x, int n) {
  int32_t part = 0, total = 0;
  for (int f = int(threadIdx.x); f < n; f += kRankThreads) part += x[f];
  block_scan(part, total);
  return total;
}

struct CapacityArgs {
  int64_t N, K, NK;
  int E, W;               // experts, 32-token words
  int32_t cap, multiple;  // cap = min(capacity, N) (N: no cap); multiple 0: none
  bool by_position, pad_to_capacity;
};

// Block e: cand[first_e ..] = e's choices in token order, keep[i] for each of them, rows_e[e] = its row count,
// counts[e] += its kept tokens.
__global__ void __launch_bounds__(kRankThreads) cap_select_kernel(CapacityArgs a, const int32_t* top,
                                                                    const float* probs, const int32_t* rank,
                                                                    const int32_t* routed, int32_t* cand,
                                                                    int32_t* keep, int32_t* rows_e, int32_t* counts) {
  __shared__ float tile[kRankThreads];
  const int e = int(blockIdx.x), tid = int(threadIdx.x);
  const int32_t first = sum_before(routed, e), n = routed[e];
  for (int64_t i = tid; i < a.NK; i += kRankThreads)
    if (top[i] == e) cand[first + rank[i]] = int32_t(i);
  __syncthreads();
  const bool drop = n > a.cap;  // the same for the whole block
  for (int32_t p0 = 0; p0 < n; p0 += kRankThreads) {
    const int32_t p = p0 + tid;
    const int32_t slot = p < n ? cand[first + p] : 0;
    bool kept = true;
    if (drop && a.by_position) {
      kept = p < a.cap;
    } else if (drop) {
      const float mine = p < n ? probs[slot] : 0.0f;
      int32_t better = 0;  // the choices ranked before this one
      for (int32_t q0 = 0; q0 < n; q0 += kRankThreads) {
        __syncthreads();
        if (q0 + tid < n) tile[tid] = probs[cand[first + q0 + tid]];
        __syncthreads();
        const int32_t qn = min(kRankThreads, n - q0);
        for (int32_t q = 0; q < qn; ++q) better += tile[q] > mine || (tile[q] == mine && q0 + q < p);
      }
      kept = better < a.cap;
    }
    if (p < n) keep[slot] = kept;
  }
  if (tid == 0) {
    const int32_t kept = min(n, a.cap);
    int64_t target = a.pad_to_capacity ? a.cap : kept;
    if (a.multiple > 0) target = (target + a.multiple - 1) / a.multiple * a.multiple;
    rows_e[e] = int32_t(min(target, a.N));
    counts[e] += kept;
  }
}

// Block e: its rows (row_token, row_prob, offsets[e]; offsets[E] by the last block), and per 32-token word w
// the bits of the tokens it holds (member[e*W + w]) and the row of the first of them (word_row).
__global__ void __launch_bounds__(kRankThreads) cap_rows_kernel(CapacityArgs a, const int32_t* top,
                                                                  const int32_t* routed, const int32_t* cand,
                                                                  const int32_t* keep, const int32_t* rows_e,
                                                                  int32_t* offsets, int32_t* row_token,
                                                                  int32_t* row_prob, uint32_t* member,
                                                                  int32_t* word_row) {
  extern __shared__ uint32_t held[];  // (W) the tokens e keeps
  const int e = int(blockIdx.x), tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int32_t cand_first = sum_before(routed, e), row_first = sum_before(rows_e, e);
  const int32_t n = routed[e], rows = rows_e[e];
  if (tid == 0) {
    offsets[e] = row_first;
    if (e == a.E - 1) offsets[a.E] = row_first + rows;
  }
  for (int w = tid; w < a.W; w += kRankThreads) held[w] = 0;
  __syncthreads();
  int32_t mine = 0;
  for (int32_t p = tid; p < n; p += kRankThreads) {
    const int32_t slot = cand[cand_first + p];
    if (!keep[slot]) continue;
    const int64_t t = slot / a.K;
    atomicOr(&held[t >> 5], 1u << (t & 31));
    ++mine;
  }
  int32_t kept = 0;
  block_scan(mine, kept);  // also orders the bitmap writes before the reads below
  const int32_t pad = rows - kept;
  int32_t free_before = 0, rows_before = 0;  // over the earlier chunks
  for (int64_t t0 = 0; t0 < a.N; t0 += kRankThreads) {
    const int64_t t = t0 + tid;
    const bool in = t < a.N, h = in && ((held[t >> 5] >> (t & 31)) & 1u);
    int32_t free_chunk = 0, used_chunk = 0;
    const int32_t free_rank = free_before + block_scan(in && !h, free_chunk);
    const bool use = h || (in && !h && free_rank < pad);
    const int32_t r = row_first + rows_before + block_scan(use, used_chunk);
    const uint32_t bits = __ballot_sync(0xffffffffu, use);
    const int64_t w = (t0 >> 5) + warp;
    if (lane == 0 && w < a.W) {
      member[int64_t(e) * a.W + w] = bits;
      word_row[int64_t(e) * a.W + w] = r;
    }
    if (use) {
      int32_t slot = int32_t(a.NK);  // padding
      for (int64_t j = 0; h && j < a.K; ++j)
        if (top[t * a.K + j] == e) slot = int32_t(t * a.K + j);
      row_token[r] = int32_t(t);
      row_prob[r] = slot;
    }
    free_before += free_chunk;
    rows_before += used_chunk;
  }
}

// The row of token t in expert e, given that e holds t.
__device__ __forceinline__ int32_t row_of(const uint32_t* member, const int32_t* word_row, int W, int e, int64_t t) {
  const int64_t w = int64_t(e) * W + (t >> 5);
  return word_row[w] + __popc(member[w] & ((1u << (t & 31)) - 1u));
}

// Per token: its rows (the experts holding it) and its kept choices.
__global__ void cap_token_count_kernel(CapacityArgs a, const uint32_t* member, const int32_t* keep, int32_t* n_rows,
                                       int32_t* n_kept) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < a.N; t += int64_t(gridDim.x) * blockDim.x) {
    int32_t rows = 0, kept = 0;
    for (int e = 0; e < a.E; ++e) rows += (member[int64_t(e) * a.W + (t >> 5)] >> (t & 31)) & 1u;
    for (int64_t j = 0; j < a.K; ++j) kept += keep[t * a.K + j];
    n_rows[t] = rows;
    n_kept[t] = kept;
  }
}

// One block, each thread a contiguous run of tokens: token_offsets and each token's first kept-choice index
// (kept_first), exclusive prefixes in token order; prob_offsets[N*K] = the kept choices.
__global__ void __launch_bounds__(kRankThreads) cap_scan_kernel(CapacityArgs a, const int32_t* n_rows,
                                                                  const int32_t* n_kept, int32_t* token_offsets,
                                                                  int32_t* kept_first, int32_t* prob_offsets) {
  const int64_t seg = (a.N + kRankThreads - 1) / kRankThreads;
  const int64_t t0 = min(a.N, int64_t(threadIdx.x) * seg), t1 = min(a.N, t0 + seg);
  int32_t rows = 0, kept = 0;
  for (int64_t t = t0; t < t1; ++t) {
    rows += n_rows[t];
    kept += n_kept[t];
  }
  int32_t all_rows = 0, all_kept = 0;
  rows = block_scan(rows, all_rows);
  kept = block_scan(kept, all_kept);
  for (int64_t t = t0; t < t1; ++t) {
    token_offsets[t] = rows;
    kept_first[t] = kept;
    rows += n_rows[t];
    kept += n_kept[t];
  }
  if (threadIdx.x == 0) {
    token_offsets[a.N] = all_rows;
    prob_offsets[a.NK] = all_kept;
  }
}

// Per token: its rows in expert order (ascending), and the prob CSR of its choices.
__global__ void cap_token_fill_kernel(CapacityArgs a, const int32_t* top, const uint32_t* member,
                                      const int32_t* word_row, const int32_t* keep, const int32_t* token_offsets,
                                      const int32_t* kept_first, int32_t* token_rows, int32_t* prob_offsets,
                                      int32_t* prob_rows) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < a.N; t += int64_t(gridDim.x) * blockDim.x) {
    int32_t at = token_offsets[t];
    for (int e = 0; e < a.E; ++e)
      if ((member[int64_t(e) * a.W + (t >> 5)] >> (t & 31)) & 1u)
        token_rows[at++] = row_of(member, word_row, a.W, e, t);
    int32_t k = kept_first[t];
    for (int64_t i = t * a.K; i < (t + 1) * a.K; ++i) {
      prob_offsets[i] = k;
      if (keep[i]) prob_rows[k++] = row_of(member, word_row, a.W, top[i], t);
    }
  }
}

// The unused entries: rows from R on carry token 0, choice N*K and no token row; prob_rows past the kept
// choices are 0.
__global__ void cap_tail_kernel(CapacityArgs a, int64_t R_max, const int32_t* offsets, const int32_t* prob_offsets,
                                int32_t* row_token, int32_t* row_prob, int32_t* token_rows, int32_t* prob_rows) {
  const int32_t R = offsets[a.E], kept = prob_offsets[a.NK];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < max(R_max, a.NK);
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i >= R && i < R_max) {
      row_token[i] = 0;
      row_prob[i] = int32_t(a.NK);
      token_rows[i] = 0;
    }
    if (i >= kept && i < a.NK) prob_rows[i] = 0;
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
      top.data<int32_t>(), rank.data<int32_t>(), rows, N, int(K), int(num_experts), offsets.data<int32_t>(),
      row_token.data<int32_t>(), row_slot.data<int32_t>(), slot_row.data<int32_t>(), token_rows.data<int32_t>());
  check_launch("plan_rows_kernel");
}

void moe_plan_capacity(Exec& ex, Tensor& counts, Tensor& offsets, Tensor& row_token, Tensor& row_prob,
                       Tensor& token_offsets, Tensor& token_rows, Tensor& prob_offsets, Tensor& prob_rows,
                       const Tensor& top, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       bool drop_by_position, bool pad_to_capacity, int64_t pad_multiple) {
  const char* op = "moe_plan_capacity on CUDA";
  const int64_t N = top.size(0), K = top.size(1), NK = top.numel(), E = num_experts, W = (N + 31) / 32;
  HYTRA_CHECK(E <= 65535, op, ": ", E, " experts (at most 65535)");
  HYTRA_CHECK(W * 4 <= 200 * 1024, op, ": ", N, " tokens (the held-token bitmap takes at most 200 KiB)");
  HYTRA_CHECK(E * W < (int64_t(1) << 31) && pad_multiple < (int64_t(1) << 31), op, ": ", E, " experts x ", N,
              " tokens and padding multiple ", pad_multiple, " must fit int32");
  CapacityArgs a{N, K, NK, int(E), int(W), int32_t(capacity > 0 ? std::min(capacity, N) : N), int32_t(pad_multiple),
                 drop_by_position, pad_to_capacity};
  cudaStream_t s = stream_of(ex);
  // Scratch: rank (NK), cand (NK), keep (NK), routed (E), rows_e (E), word_row (E*W), member (E*W),
  // n_rows (N), n_kept (N), kept_first (N).
  Tensor scratch = Tensor::empty({3 * NK + 2 * E + 2 * E * W + 3 * N}, DType::I32, Device::CUDA);
  int32_t* rank = scratch.data<int32_t>();
  int32_t *cand = rank + NK, *keep = cand + NK, *routed = keep + NK, *rows_e = routed + E, *word_row = rows_e + E;
  uint32_t* member = reinterpret_cast<uint32_t*>(word_row + E * W);
  int32_t* n_rows = reinterpret_cast<int32_t*>(member + E * W);
  int32_t *n_kept = n_rows + N, *kept_first = n_kept + N;
  const int32_t* ids = top.data<int32_t>();

  // An id outside [0,E) is no expert's candidate: its keep flag stays 0 and it gets no row (CPU: an error).
  cuda_check(cudaMemsetAsync(keep, 0, size_t(NK) * sizeof(int32_t), s), "moe_plan_capacity keep flags");
  plan_rank_kernel<<<unsigned(E), kRankThreads, 0, s>>>(ids, NK, rank, routed, nullptr);
  check_launch("plan_rank_kernel");
  cap_select_kernel<<<unsigned(E), kRankThreads, 0, s>>>(a, ids, probs.data<float>(), rank, routed, cand, keep,
                                                         rows_e, counts.data<int32_t>());
  check_launch("cap_select_kernel");
  const int64_t smem = W * int64_t(sizeof(uint32_t));
  allow_smem(&cap_rows_kernel, smem, "cap_rows_kernel smem");
  cap_rows_kernel<<<unsigned(E), kRankThreads, size_t(smem), s>>>(a, ids, routed, cand, keep, rows_e,
                                                                   offsets.data<int32_t>(), row_token.data<int32_t>(),
                                                                   row_prob.data<int32_t>(), member, word_row);
  check_launch("cap_rows_kernel");
  cap_token_count_kernel<<<grid_for(N, kRowThreads), kRowThreads, 0, s>>>(a, member, keep, n_rows, n_kept);
  check_launch("cap_token_count_kernel");
  cap_scan_kernel<<<1, kRankThreads, 0, s>>>(a, n_rows, n_kept, token_offsets.data<int32_t>(), kept_first,
                                             prob_offsets.data<int32_t>());
  check_launch("cap_scan_kernel");
  cap_token_fill_kernel<<<grid_for(N, kRowThreads), kRowThreads, 0, s>>>(
      a, ids, member, word_row, keep, token_offsets.data<int32_t>(), kept_first, token_rows.data<int32_t>(),
      prob_offsets.data<int32_t>(), prob_rows.data<int32_t>());
  check_launch("cap_token_fill_kernel");
  const int64_t R_max = row_token.numel();
  cap_tail_kernel<<<grid_for(std::max(R_max, NK), kRowThreads), kRowThreads, 0, s>>>(
      a, R_max, offsets.data<int32_t>(), prob_offsets.data<int32_t>(), row_token.data<int32_t>(),
      row_prob.data<int32_t>(), token_rows.data<int32_t>(), prob_rows.data<int32_t>());
  check_launch("cap_tail_kernel");
}

}  // namespace hytra::cuda
