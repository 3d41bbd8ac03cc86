// MoE router ops on CUDA (ops.h "mixture-of-experts"; docs/spec/moe.md §1-§2): top-k routing forward
// and backward, the Switch load-balancing loss and the z-loss, fp32 throughout. The formulas, the
// selection order (value descending, ties to the lower index) and the aux loss's top k on the
// logits are those of the CPU reference, ops/cpu/moe_router.cpp.
// One warp per token row (kWarps rows per block); each lane holds one selected expert, so k <= 32
// (a named error otherwise), and E + num_groups <= 3072 (the fwd's shared memory).
// Top k is k warp-wide argmax passes: pass j takes the best element ranking after pass j-1's pick
// (a strict total order, so nothing is marked). moe_router_fwd keeps the row's selection values
// in shared memory (E + num_groups floats per warp), masking dropped groups with -inf; a lane
// scores a whole group (sum of its top k / group_topk values, best first).
// Deterministic, no atomics: row kernels write only their row; the aux loss sums each sequence's
// tokens in chunks of kChunkRows rows in row order, then one block adds the chunks (a warp per column, in a
// fixed order) and forms the loss with a fixed-order block reduction; the z-loss keeps lse per row and one block
// adds lse^2 the same way.
#include <climits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

using ops::RouterScore;

constexpr int kWarps = 4;             // rows per block in the row kernels
constexpr int kMaxK = 32;             // selected experts per row: one lane each
constexpr int kMaxSmemFloats = 12288; // 48 KiB of selection values per block
constexpr int64_t kChunkRows = 32;    // aux loss: rows per partial column sum
constexpr int kColThreads = 128;
constexpr int kFinishThreads = 256;

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// (va, a) ranks before (vb, b): larger value, or equal value and lower index.
__device__ __forceinline__ bool ranks_before(float va, int a, float vb, int b) {
  return va > vb || (va == vb && a < b);
}

// (bv, bi) := the best of v[j], j = first, first + stride, ... < end, that ranks after (pv, pi);
// (-inf, INT_MAX) when there is none.
__device__ __forceinline__ void best_after(const float* v, int first, int end, int stride, float pv, int pi, float& bv,
                                           int& bi) {
  bv = -INFINITY;
  bi = INT_MAX;
  for (int j = first; j < end; j += stride)
    if (ranks_before(pv, pi, v[j], j) && ranks_before(v[j], j, bv, bi)) {
      bv = v[j];
      bi = j;
    }
}

// The best (v, i) over the warp, returned to every lane.
__device__ __forceinline__ void warp_best(float& v, int& i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ranks_before(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// The K best of v (E) over the warp, best first: lane j < K gets pick j in (mine_v, mine_i).
__device__ __forceinline__ void warp_top_k(const float* v, int E, int K, int lane, float& mine_v, int& mine_i) {
  float pv = INFINITY, bv;
  int pi = -1, bi;
  mine_v = -INFINITY;
  mine_i = 0;
  for (int j = 0; j < K; ++j) {
    best_after(v, lane, E, 32, pv, pi, bv, bi);
    warp_best(bv, bi);
    if (lane == j) {
      mine_v = bv;
      mine_i = bi;
    }
    pv = bv;
    pi = bi;
  }
}

// Row maximum and sum of exp(x - max), on every lane.
__device__ __forceinline__ void warp_softmax_stats(const float* x, int E, int lane, float& m, float& z) {
  m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, x[e]);
  m = warp_max(m);
  z = 0.0f;
  for (int e = lane; e < E; e += 32) z += expf(x[e] - m);
  z = warp_sum(z);
}

// ---- moe_router_fwd / moe_router_bwd ------------------------------------------------------------

__global__ void router_fwd_kernel(float* probs, int32_t* top, const float* logits, const float* bias, int64_t N,
                                  int E, int K, RouterScore score, bool pre_softmax, int G, int group_topk,
                                  float scaling) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= N) return;
  float* v = smem + warp * (E + G);  // (E) selection values
  float* gs = v + E;                 // (G) group scores, then kept-group flags
  const float* x = logits + row * E;
  if (score == RouterScore::Sigmoid) {
    for (int e = lane; e < E; e += 32) v[e] = sigmoidf(x[e]) + (bias != nullptr ? bias[e] : 0.0f);
  } else if (pre_softmax) {
    float m, z;
    warp_softmax_stats(x, E, lane, m, z);
    for (int e = lane; e < E; e += 32) v[e] = expf(x[e] - m) / z;
  } else {
    for (int e = lane; e < E; e += 32) v[e] = x[e];
  }
  __syncwarp();
  if (G > 0) {
    const int per = E / G, m = K / group_topk;
    for (int g = lane; g < G; g += 32) {
      float pv = INFINITY, bv, sum = 0.0f;
      int pi = -1, bi;
      for (int j = 0; j < m; ++j) {
        best_after(v, g * per, (g + 1) * per, 1, pv, pi, bv, bi);
        sum += bv;
        pv = bv;
        pi = bi;
      }
      gs[g] = sum;
    }
    __syncwarp();
    float kept_v;
    int kept;
    warp_top_k(gs, G, group_topk, lane, kept_v, kept);
    __syncwarp();
    for (int g = lane; g < G; g += 32) gs[g] = 0.0f;
    __syncwarp();
    if (lane < group_topk) gs[kept] = 1.0f;
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (gs[e / per] == 0.0f) v[e] = -INFINITY;
    __syncwarp();
  }
  float sel;
  int idx;
  warp_top_k(v, E, K, lane, sel, idx);
  const bool on = lane < K;
  float p;
  if (score == RouterScore::Softmax && !pre_softmax) {
    const float m = warp_max(on ? sel : -INFINITY);
    const float ez = on ? expf(sel - m) : 0.0f;
    p = ez / warp_sum(ez);
  } else if (score == RouterScore::Softmax) {
    p = sel;
  } else {
    const float s = on ? sigmoidf(x[idx]) : 0.0f;
    p = K > 1 ? s / (warp_sum(s) + 1e-20f) : s;
  }
  if (on) {
    probs[row * K + lane] = p * scaling;
    top[row * K + lane] = idx;
  }
}

__global__ void router_bwd_kernel(float* dlogits, const float* dprobs, const float* logits, const int32_t* top,
                                  int64_t N, int E, int K, RouterScore score, bool pre_softmax, float scaling) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= N) return;
  const float* x = logits + row * E;
  float* dx = dlogits + row * E;
  const bool on = lane < K;
  const int t = on ? top[row * K + lane] : 0;
  const float g = on ? dprobs[row * K + lane] * scaling : 0.0f;
  float d;
  if (score == RouterScore::Softmax && pre_softmax) {
    float m, z;
    warp_softmax_stats(x, E, lane, m, z);
    const float st = on ? expf(x[t] - m) / z : 0.0f;
    const float dot = warp_sum(st * g);
    for (int e = lane; e < E; e += 32) dx[e] = expf(x[e] - m) / z * (0.0f - dot);
    d = st * (g - dot);
  } else {
    for (int e = lane; e < E; e += 32) dx[e] = 0.0f;
    if (score == RouterScore::Softmax) {
      const float zt = on ? x[t] : -INFINITY;
      const float m = warp_max(zt);
      const float ez = on ? expf(zt - m) : 0.0f;
      const float p = ez / warp_sum(ez);
      d = p * (g - warp_sum(p * g));
    } else {
      const float s = on ? sigmoidf(x[t]) : 0.0f;
      const float Z = warp_sum(s) + 1e-20f;
      const float ds = K > 1 ? (g - warp_sum(s / Z * g)) / Z : g;
      d = ds * s * (1.0f - s);
    }
  }
  __syncwarp();  // the row's dense writes land before the selected entries
  if (on) dx[t] = d;
}

// ---- moe_aux_loss --------------------------------------------------------------------------------

// Score of logit xe given the row's stats (m, Z): softmax exp(xe - m) / Z, or sigmoid(xe) / Z.
__device__ __forceinline__ float aux_score(float xe, float m, float Z, RouterScore score) {
  return score == RouterScore::Softmax ? expf(xe - m) / Z : sigmoidf(xe) / Z;
}

// Per row: stats (N,2) = (m, Z) of the scores; picked (N,K) = the top k of the logits.
__global__ void aux_rows_kernel(float* stats, int32_t* picked, const float* logits, int64_t N, int E, int K,
                                RouterScore score) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= N) return;
  const float* x = logits + row * E;
  float m = 0.0f, Z;
  if (score == RouterScore::Softmax) {
    warp_softmax_stats(x, E, lane, m, Z);
  } else {
    float s = 0.0f;
    for (int e = lane; e < E; e += 32) s += sigmoidf(x[e]);
    Z = warp_sum(s) + 1e-20f;
  }
  float sel;
  int idx;
  warp_top_k(x, E, K, lane, sel, idx);
  if (lane < K) picked[row * K + lane] = idx;
  if (lane == 0) {
    stats[2 * row] = m;
    stats[2 * row + 1] = Z;
  }
}

// Chunk c (blockIdx.y) of sequence q = c / cps: rows [q T + (c % cps) kChunkRows, ...) up to the
// sequence end. pP, pC (chunks,E) = the chunk's column sums of scores and of picks, in row order.
__global__ void aux_partials_kernel(float* pP, float* pC, const float* logits, const float* stats,
                                    const int32_t* picked, int E, int K, int64_t T, int64_t cps, RouterScore score) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t c = blockIdx.y, q = c / cps;
  if (e >= E) return;
  const int64_t r0 = q * T + (c % cps) * kChunkRows;
  const int64_t r1 = r0 + kChunkRows < (q + 1) * T ? r0 + kChunkRows : (q + 1) * T;
  float P = 0.0f, C = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    P += aux_score(logits[r * E + e], stats[2 * r], stats[2 * r + 1], score);
    for (int i = 0; i < K; ++i) C += picked[r * K + i] == e ? 1.0f : 0.0f;
  }
  pP[c * E + e] = P;
  pC[c * E + e] = C;
}

// One block: counts (S,E) = the chunks' pick sums; loss = c * sum_j P_j tokens_j. A warp per column j: lane l
// sums chunks l, l+32, ... in order, then a fixed shuffle tree (so the order depends on cps alone).
__global__ void aux_finish_kernel(float* loss, float* counts, const float* pP, const float* pC,
                                  const float* global_counts, int64_t S, int E, int64_t cps, float c) {
  __shared__ float red[32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  float acc = 0.0f;
  for (int64_t j = warp; j < S * E; j += warps) {
    const int64_t q = j / E, e = j % E;
    float P = 0.0f, C = 0.0f;
    for (int64_t i = lane; i < cps; i += 32) {
      P += pP[(q * cps + i) * E + e];
      C += pC[(q * cps + i) * E + e];
    }
    P = warp_sum(P);
    C = warp_sum(C);
    if (lane == 0) {
      counts[j] = C;
      acc += P * (global_counts != nullptr ? global_counts[e] : C);
    }
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) loss[0] = c * acc;
}

// dlogits (N,E) += the scores' backward of g[t,e] = gcoef * tokens[t / T, e].
__global__ void aux_grad_kernel(float* dlogits, const float* logits, const float* stats, const float* tokens,
                                int64_t N, int E, int64_t T, RouterScore score, float gcoef) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= N) return;
  const float* x = logits + row * E;
  const float* tok = tokens + (row / T) * E;
  float* dx = dlogits + row * E;
  const float m = stats[2 * row], Z = stats[2 * row + 1];
  float dot = 0.0f;
  for (int e = lane; e < E; e += 32) dot += aux_score(x[e], m, Z, score) * (gcoef * tok[e]);
  dot = warp_sum(dot);
  for (int e = lane; e < E; e += 32) {
    const float g = gcoef * tok[e];
    if (score == RouterScore::Softmax) {
      dx[e] += aux_score(x[e], m, Z, score) * (g - dot);
    } else {
      const float sg = sigmoidf(x[e]);
      dx[e] += (g - dot) / Z * (sg * (1.0f - sg));
    }
  }
}

// ---- moe_z_loss ----------------------------------------------------------------------------------

// lse (N) = logsumexp of each row; dlogits += gz * lse * softmax.
__global__ void z_rows_kernel(float* lse, float* dlogits, const float* logits, int64_t N, int E, float gz) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= N) return;
  const float* x = logits + row * E;
  float* dx = dlogits + row * E;
  float m, z;
  warp_softmax_stats(x, E, lane, m, z);
  const float l = m + logf(z);
  if (lane == 0) lse[row] = l;
  for (int e = lane; e < E; e += 32) dx[e] += gz * l * (expf(x[e] - m) / z);
}

__global__ void z_finish_kernel(float* loss, const float* lse, int64_t N, float c) {
  __shared__ float red[32];
  float acc = 0.0f;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) acc += lse[n] * lse[n];
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) loss[0] = c * acc;
}

unsigned row_blocks(int64_t N) { return unsigned((N + kWarps - 1) / kWarps); }

void check_k(const char* op, int64_t k) {
  HYTRA_CHECK(k <= kMaxK, op, " on CUDA: k must be at most ", kMaxK, ", got ", k);
}

}  // namespace

void moe_router_fwd(Exec& ex, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k,
                    ops::RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk,
                    double scaling) {
  const int64_t N = logits.size(0), E = logits.size(1);
  check_k("moe_router_fwd", k);
  HYTRA_CHECK(kWarps * (E + num_groups) <= kMaxSmemFloats, "moe_router_fwd on CUDA: E + num_groups must be at most ",
              kMaxSmemFloats / kWarps, ", got ", E + num_groups);
  if (N == 0) return;
  const size_t smem = size_t(kWarps * (E + num_groups)) * sizeof(float);
  router_fwd_kernel<<<row_blocks(N), kWarps * 32, smem, stream_of(ex)>>>(
      probs.data<float>(), top.data<int32_t>(), logits.data<float>(),
      expert_bias.defined() ? expert_bias.data<float>() : nullptr, N, int(E), int(k), score, pre_softmax,
      int(num_groups), int(group_topk), float(scaling));
  check_launch("router_fwd_kernel");
}

void moe_router_bwd(Exec& ex, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top,
                    ops::RouterScore score, bool pre_softmax, double scaling) {
  const int64_t N = logits.size(0), E = logits.size(1), K = top.size(1);
  check_k("moe_router_bwd", K);
  if (N == 0) return;
  router_bwd_kernel<<<row_blocks(N), kWarps * 32, 0, stream_of(ex)>>>(
      dlogits.data<float>(), dprobs.data<float>(), logits.data<float>(), top.data<int32_t>(), N, int(E), int(K),
      score, pre_softmax, float(scaling));
  check_launch("router_bwd_kernel");
}

void moe_aux_loss(Exec& ex, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits,
                  const Tensor& global_counts, int64_t k, ops::RouterScore score, int64_t num_seqs, double coeff,
                  double grad_scale) {
  const int64_t N = logits.size(0), E = logits.size(1), S = num_seqs, T = N / S;
  check_k("moe_aux_loss", k);
  cudaStream_t s = stream_of(ex);
  if (N == 0) {
    cuda_check(cudaMemsetAsync(loss.raw(), 0, loss.nbytes(), s), "moe_aux_loss");
    cuda_check(cudaMemsetAsync(counts.raw(), 0, counts.nbytes(), s), "moe_aux_loss");
    return;
  }
  const int64_t cps = (T + kChunkRows - 1) / kChunkRows;  // chunks per sequence
  HYTRA_CHECK(S * cps <= 65535, "moe_aux_loss on CUDA: too many row chunks (", S * cps, ")");
  Tensor stats = Tensor::empty({N, 2}, DType::F32, Device::CUDA);          // (N,2) m, Z
  Tensor picked = Tensor::empty({N, k}, DType::I32, Device::CUDA);         // (N,K)
  Tensor pP = Tensor::empty({S * cps, E}, DType::F32, Device::CUDA);       // (chunks,E)
  Tensor pC = Tensor::empty({S * cps, E}, DType::F32, Device::CUDA);       // (chunks,E)
  aux_rows_kernel<<<row_blocks(N), kWarps * 32, 0, s>>>(stats.data<float>(), picked.data<int32_t>(),
                                                        logits.data<float>(), N, int(E), int(k), score);
  check_launch("aux_rows_kernel");
  const dim3 grid(unsigned((E + kColThreads - 1) / kColThreads), unsigned(S * cps));
  aux_partials_kernel<<<grid, kColThreads, 0, s>>>(pP.data<float>(), pC.data<float>(), logits.data<float>(),
                                                   stats.data<float>(), picked.data<int32_t>(), int(E), int(k), T,
                                                   cps, score);
  check_launch("aux_partials_kernel");
  const double c = coeff * double(E) / (double(k) * double(T) * double(T) * double(S));
  const float* global = global_counts.defined() ? global_counts.data<float>() : nullptr;
  aux_finish_kernel<<<1, kFinishThreads, 0, s>>>(loss.data<float>(), counts.data<float>(), pP.data<float>(),
                                                 pC.data<float>(), global, S, int(E), cps, float(c));
  check_launch("aux_finish_kernel");
  if (!dlogits.defined()) return;
  aux_grad_kernel<<<row_blocks(N), kWarps * 32, 0, s>>>(dlogits.data<float>(), logits.data<float>(),
                                                        stats.data<float>(), global ? global : counts.data<float>(),
                                                        N, int(E), T, score, float(grad_scale * c));
  check_launch("aux_grad_kernel");
}

void moe_z_loss(Exec& ex, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale) {
  const int64_t N = logits.size(0), E = logits.size(1);
  cudaStream_t s = stream_of(ex);
  if (N == 0) {
    cuda_check(cudaMemsetAsync(loss.raw(), 0, loss.nbytes(), s), "moe_z_loss");
    return;
  }
  Tensor lse = Tensor::empty({N}, DType::F32, Device::CUDA);  // (N)
  z_rows_kernel<<<row_blocks(N), kWarps * 32, 0, s>>>(lse.data<float>(), dlogits.data<float>(), logits.data<float>(),
                                                      N, int(E), float(grad_scale * coeff * 2.0 / double(N)));
  check_launch("z_rows_kernel");
  z_finish_kernel<<<1, kFinishThreads, 0, s>>>(loss.data<float>(), lse.data<float>(), N, float(coeff / double(N)));
  check_launch("z_finish_kernel");
}

}  // namespace hytra::cuda
