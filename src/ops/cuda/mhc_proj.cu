// The mHC mapping projection and the streams' gradient before the sub-layer on CUDA (ops.def mhc_proj_fwd /
// mhc_streams_bwd): tall, skinny GEMMs between the streams x (N, D = nC, bf16 or fp32, read as stored: no fp32 copy)
// and the mapping weight w (P = n^2 + 2n rows of D, fp32), P <= 288 (n <= 16). The forward also sums each token's
// squares (rms); the backward's dx pass adds the aggregation's and the r path's terms to dproj w, so the stream
// gradient is read and written once.
// bf16 streams with P <= 80 and 16-byte aligned tensors run on the tensor cores (mma.m16n8k16, fp32 accumulation),
// the fp32 operands w and dproj split into two bf16 terms each (about 2^-17 relative):
//   forward  (D a multiple of 32) proj_fwd_tc_kernel: a warp takes 16 tokens and one of kTcSplit parts of D.
//   backward (C a multiple of 32) streams_dx_tc_kernel: a warp holds w's fragments of 32 columns (one stream's), a
//            block walks one of kDwSplit parts of the tokens with its tiles staged by cp.async, and for P <= 32 also
//            sums dw's part from the same staged tiles; otherwise proj_dw_tc_kernel: 32-token tiles of x staged by
//            cp.async and read by ldmatrix .trans, one of kDwSplit parts of the tokens a block.
// Otherwise fp32 FMAs:
//   forward  proj (N,P) = x w^T: a block takes 256 tokens (64 for n > 8) and one of kSplit parts of D (chunks of 32
//            columns staged k-major); warp g sums outputs g, g + 8, ..., each lane 8 (2) tokens; warp 0 also sums
//            the squares.
//   dx       a block takes 16 tokens (their dproj rows in shared memory) and 512 columns, two a thread; each element
//            is read, summed over p in order, given the two other terms and rounded once.
//   dw       dw (P,D) += dproj^T x: a block takes 256 columns (64 for n > 8) and one of kDwSplit parts of the tokens
//            (chunks of 32 staged); warp g sums outputs g, g + 8, ..., each lane 8 (2) columns.
// The parts' sums go to a scratch and are added in part order. Every sum runs in a fixed order set by the shapes
// alone: deterministic, no atomics.
#include <mutex>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/warp_mma.cuh"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 32;  // columns (forward) or tokens (dw) staged a step
constexpr int kSplit = 32;  // parts of D for the forward: enough blocks to hide the staged loads
constexpr int kMaxP = 288;  // n = 16
constexpr int kDxTokens = 16;
constexpr int kDwSplit = 32;  // parts of the tokens for dw

// Segment s of [0, len) in `parts` parts.
__device__ __forceinline__ void segment(int64_t len, int s, int parts, int64_t& lo, int64_t& hi) {
  const int64_t per = (len + parts - 1) / parts;
  lo = min(len, s * per);
  hi = min(len, lo + per);
}

// acc[j][q] += g[pg + 8 j] x[lane CW + q] for one staged row x of the block's tokens or columns (a lane's CW values,
// read in pairs) and one staged row g of the outputs' factors (one address a warp: a broadcast).
template <int J, int CW>
__device__ __forceinline__ void add_row(float (&acc)[J][CW], const float* x, const float* g, int lane, int pg) {
  float xv[CW];
#pragma unroll
  for (int q = 0; q < CW; q += 2) {
    const float2 v = *reinterpret_cast<const float2*>(x + lane * CW + q);
    xv[q] = v.x;
    xv[q + 1] = v.y;
  }
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float gj = g[pg + 8 * j];
#pragma unroll
    for (int q = 0; q < CW; ++q) acc[j][q] += gj * xv[q];
  }
}

// part (kSplit, N, P): part[s][t, p] = sum over k in part s of D of x[t, k] w[p, k]. Warp pg takes the outputs
// p = pg + 8 j (j < J), lane l the tokens l CW .. l CW + CW of the block's 32 CW.
// part_ss (kSplit, N): the squares of x over part s of D, summed by warp 0.
template <class T, int J, int CW>
__global__ void __launch_bounds__(kThreads)
    proj_fwd_kernel(float* part, float* part_ss, const T* x, const float* w, int64_t N, int64_t D, int P) {
  constexpr int kTok = 32 * CW, PJ = 8 * J, XS = kTok + 4;  // XS: a k row of xs, padded (stores 4-way, not 32)
  extern __shared__ float sm[];
  float* xs = sm;                // [kChunk][XS]: k-major, the block's tokens contiguous
  float* ws = sm + kChunk * XS;  // [kChunk][PJ], outputs past P zero
  const int lane = threadIdx.x % 32, pg = threadIdx.x / 32;
  const int64_t t0 = int64_t(blockIdx.x) * kTok;
  int64_t k_lo, k_hi;
  segment(D, blockIdx.y, kSplit, k_lo, k_hi);
  float acc[J][CW] = {}, ss[CW] = {};
  for (int64_t k0 = k_lo; k0 < k_hi; k0 += kChunk) {
    for (int e = threadIdx.x; e < kTok * kChunk; e += kThreads) {  // a warp reads one token's 32 k
      const int r = e / kChunk, c = e % kChunk;
      const int64_t t = t0 + r, k = k0 + c;
      xs[c * XS + r] = t < N && k < k_hi ? float(x[t * D + k]) : 0.0f;
    }
    for (int e = threadIdx.x; e < PJ * kChunk; e += kThreads) {
      const int p = e / kChunk, c = e % kChunk;
      const int64_t k = k0 + c;
      ws[c * PJ + p] = p < P && k < k_hi ? w[p * D + k] : 0.0f;
    }
    __syncthreads();
    for (int c = 0; c < kChunk; ++c) add_row(acc, xs + c * XS, ws + c * PJ, lane, pg);
    if (pg == 0)
      for (int c = 0; c < kChunk; ++c)
#pragma unroll
        for (int q = 0; q < CW; ++q) ss[q] += xs[c * XS + lane * CW + q] * xs[c * XS + lane * CW + q];
    __syncthreads();
  }
  if (pg == 0)
#pragma unroll
    for (int q = 0; q < CW; ++q) {
      const int64_t t = t0 + lane * CW + q;
      if (t < N) part_ss[int64_t(blockIdx.y) * N + t] = ss[q];
    }
  float* out = part + int64_t(blockIdx.y) * N * P;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int p = pg + 8 * j;
    if (p >= P) break;
#pragma unroll
    for (int q = 0; q < CW; ++q) {
      const int64_t t = t0 + lane * CW + q;
      if (t < N) out[t * P + p] = acc[j][q];
    }
  }
}

// The forward on the tensor cores for bf16 streams (P <= 80, D a multiple of 32): part (kTcSplit, N, P) and the squares
// part_ss (kTcSplit, N) (each lane's, then the 4 lanes of a row in a fixed order). A warp
// takes 16 tokens and one of kTcSplit parts of D, 32 columns a step: each lane reads 8 adjacent bf16 of tokens g
// and g + 8 (16 bytes each) and the matching 8 fp32 of w's rows 8j + g, split as w = hi + lo (two bf16, error
// about 2^-17 |w|), and runs mma.m16n8k16 of x with w's hi and lo terms for each group j of 8 outputs, twice (the
// step's two halves). The k order inside an mma is permuted alike in x and w (lane t's 4 values of a half are columns
// 8t .. 8t + 3, or 8t + 4 .. 8t + 7), which leaves each product's sum over k unchanged.
constexpr int kTcSplit = 8;

// (hi, lo) bf16 pairs of w's two values: w = hi + lo to about 2^-17 relative.
__device__ __forceinline__ void split2(float w0, float w1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(w0, w1);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(w0 - hf.x, w1 - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// The sum of the squares of 8 bf16 in a 16-byte vector, in element order.
__device__ __forceinline__ float sum_squares8(const uint4& v) {
  float f[8];
  unpack16(v, f, static_cast<const __nv_bfloat16*>(nullptr));
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += f[i] * f[i];
  return s;
}

template <int J>
__global__ void __launch_bounds__(128) proj_fwd_tc_kernel(float* part, float* part_ss, const __nv_bfloat16* x,
                                                          const float* w, int64_t N, int64_t D, int P) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t t0 = (int64_t(blockIdx.y) * 4 + threadIdx.x / 32) * 16;
  if (t0 >= N) return;
  int64_t k_lo, k_hi;
  segment(D / 32, blockIdx.x, kTcSplit, k_lo, k_hi);  // in steps of 32 columns; the parts of a row run together
  const int64_t r0 = min(t0 + g, N - 1), r1 = min(t0 + g + 8, N - 1);  // rows past N read a valid row, unused
  const uint4* x0 = reinterpret_cast<const uint4*>(x + r0 * D) + t;
  const uint4* x1 = reinterpret_cast<const uint4*>(x + r1 * D) + t;
  // w's two float4 of output row 8j + g (clamped: rows past P compute a copy of the last, unused) at step ks.
  auto load_w = [&](int64_t ks, float4(&wv)[J][2]) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4* wr = reinterpret_cast<const float4*>(w + int64_t(min(8 * j + g, P - 1)) * D + ks * 32 + 8 * t);
      wv[j][0] = __ldg(wr);
      wv[j][1] = __ldg(wr + 1);
    }
  };
  // Loads run ahead of the products: x two steps (its rows come from memory), w one (from the caches).
  Acc acc[J] = {};
  float ss0 = 0.0f, ss1 = 0.0f;  // rows g, g + 8
  uint4 xa[2] = {}, xb[2] = {};  // steps ks, ks + 1: rows g and g + 8
  float4 wv[J][2], wn[J][2];
  if (k_lo < k_hi) {
    xa[0] = __ldg(x0 + k_lo * 4);
    xa[1] = __ldg(x1 + k_lo * 4);
    load_w(k_lo, wv);
  }
  if (k_lo + 1 < k_hi) {
    xb[0] = __ldg(x0 + (k_lo + 1) * 4);
    xb[1] = __ldg(x1 + (k_lo + 1) * 4);
  }
  for (int64_t ks = k_lo; ks < k_hi; ++ks) {
    uint4 xc[2] = {};
    if (ks + 2 < k_hi) {
      xc[0] = __ldg(x0 + (ks + 2) * 4);
      xc[1] = __ldg(x1 + (ks + 2) * 4);
    }
    if (ks + 1 < k_hi) load_w(ks + 1, wn);
    const uint4 a0 = xa[0], a1 = xa[1];
    ss0 += sum_squares8(a0);
    ss1 += sum_squares8(a1);
    const FragA<bf16> A[2] = {{{a0.x, a1.x, a0.y, a1.y}}, {{a0.z, a1.z, a0.w, a1.w}}};
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4 w0 = wv[j][0], w1 = wv[j][1];
      FragB<bf16> h[2], l[2];  // the two halves' hi and lo terms
      split2(w0.x, w0.y, h[0].r[0], l[0].r[0]);
      split2(w0.z, w0.w, h[0].r[1], l[0].r[1]);
      split2(w1.x, w1.y, h[1].r[0], l[1].r[0]);
      split2(w1.z, w1.w, h[1].r[1], l[1].r[1]);
      mma(acc[j], A[0], h[0]);
      mma(acc[j], A[0], l[0]);
      mma(acc[j], A[1], h[1]);
      mma(acc[j], A[1], l[1]);
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      wv[j][0] = wn[j][0];
      wv[j][1] = wn[j][1];
    }
    xa[0] = xb[0];
    xa[1] = xb[1];
    xb[0] = xc[0];
    xb[1] = xc[1];
  }
#pragma unroll
  for (int m = 1; m <= 2; m *= 2) {
    ss0 += __shfl_xor_sync(0xffffffffu, ss0, m);
    ss1 += __shfl_xor_sync(0xffffffffu, ss1, m);
  }
  if (t == 0) {
    float* o = part_ss + int64_t(blockIdx.x) * N;
    if (t0 + g < N) o[t0 + g] = ss0;
    if (t0 + g + 8 < N) o[t0 + g + 8] = ss1;
  }
  float* out = part + int64_t(blockIdx.x) * N * P;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = t0 + g + 8 * (e / 2);
      const int p = 8 * j + 2 * t + e % 2;
      if (row < N && p < P) out[row * P + p] = acc[j].v[e];
    }
}

// The per-token terms of the stream gradient (ops.def mhc_streams_bwd): the aggregation's h_pre[t,i] du[t,:] and the
// r path's scale s[t] X[t,i,:] with s = -dr r^2 / (D rms) (0 where rms = 0).
struct StreamTerms {
  const float *dr, *r, *rms, *h_pre;
  int n;
  int64_t C;
  __device__ __forceinline__ float scale(int64_t t, int64_t D) const {
    const float m = rms[t], rt = r[t];
    return m > 0.0f ? -dr[t] * rt * rt / (float(D) * m) : 0.0f;
  }
};

// dx on the tensor cores for bf16 streams (P <= 80, C a multiple of 32, aligned): dx (N,D) += dproj w + the stream
// terms, with dproj and w each split into two bf16 terms and three products (hi hi, hi lo, lo hi; the dropped lo lo is
// at most about 2^-18 of each product). A block of 4 warps takes one of kDwSplit parts of the tokens (whole 16-token
// tiles) and 128 columns: warp q holds w's fragments of columns 32q .. 32q + 31 (4 n tiles of 8, p in KS steps of 16,
// P padded with zeros; one stream's columns) and the warps walk the tokens together, 16 at a time. With kDw (P <= 32)
// the block also sums dw's part over its tokens from the staged x and dproj (dproj split in two bf16 terms, x exact:
// two products; m16n8k16 with p as rows and the tokens as k), written to part (kDwSplit, P, D) in the end. Tiles are
// staged by cp.async into a ring of kDxRing stages, kDxRing - 1 tiles ahead: each warp's dx, x and du (16 rows x 32
// columns), and the rows' dproj once for the block. A tile's products go through the warp's shared-memory tile, so that
// lane l then owns 16 adjacent columns of row l / 2 and moves them in 16-byte vectors. Each element is read once,
// summed in a fixed order and rounded once.
constexpr int kDxPitch = 36;  // floats a row of a warp's 16 x 32 product tile (36: no bank conflicts)
constexpr int kDxRing = 3;
constexpr int kDxRowsBytes = 16 * 32 * 2;  // one bf16 tensor's 16 x 32 tile of a warp

// A stage: the 4 warps' dx, x, du tiles (row-major, 64 bytes a row), then the 16 rows of dproj (16 P floats, as in
// memory). After the ring, the warps' product tiles.
__host__ __device__ constexpr int dx_stage_bytes(int P) { return 4 * 3 * kDxRowsBytes + 64 * P; }
__host__ __device__ constexpr int dx_smem_bytes(int P) { return kDxRing * dx_stage_bytes(P) + 4 * 16 * kDxPitch * 4; }

template <int KS, bool kDw>
__global__ void __launch_bounds__(128)
    streams_dx_tc_kernel(__nv_bfloat16* __restrict__ dx, float* __restrict__ part, const float* __restrict__ dproj,
                         const float* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                         const __nv_bfloat16* __restrict__ du, StreamTerms st, int64_t N, int64_t D, int P) {
  extern __shared__ __align__(16) uint8_t dx_smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float* tile = reinterpret_cast<float*>(dx_smem + kDxRing * dx_stage_bytes(P)) + warp * 16 * kDxPitch;
  const int64_t c0 = int64_t(blockIdx.x) * 128 + warp * 32;  // column blocks first: whole rows together
  const bool active = c0 < D;                                // (the warp still takes part in the block's barriers)
  const int stream = active ? int(c0 / st.C) : 0, my_row = lane / 2, my_col = 16 * (lane % 2);
  const int64_t cu = c0 - stream * st.C;  // du's column of c0
  int64_t tile_lo, tile_hi;
  segment((N + 15) / 16, blockIdx.y, kDwSplit, tile_lo, tile_hi);
  const int64_t t_begin = 16 * tile_lo, t_end = min(N, 16 * tile_hi);
  const int tiles = int(tile_hi - tile_lo);
  // Tile i (rows t_begin + 16 i ..) into stage i % kDxRing: lane l copies 16-byte pieces l and l + 32 of its warp's
  // 64-piece bf16 tiles (row = piece / 4), thread k pieces k, k + 128, ... of dproj's 4P; rows past t_end are
  // zero-filled.
  auto stage = [&](int i) {
    if (i < tiles) {
      uint8_t* sp = dx_smem + (i % kDxRing) * dx_stage_bytes(P);
      const int64_t r0 = t_begin + 16 * int64_t(i);
      if (active) {
        uint8_t* mine = sp + warp * 3 * kDxRowsBytes;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int piece = lane + 32 * h, r = piece / 4, q = piece % 4;
          const int64_t row = min(r0 + r, t_end - 1);
          const int bytes = r0 + r < t_end ? 16 : 0;
          const int64_t at = row * D + c0 + 8 * q;
          cp_async16(mine + piece * 16, dx + at, bytes);
          cp_async16(mine + kDxRowsBytes + piece * 16, x + at, bytes);
          cp_async16(mine + 2 * kDxRowsBytes + piece * 16, du + row * st.C + cu + 8 * q, bytes);
        }
      }
      const int64_t e0 = r0 * P, e_end = t_end * P;  // dproj elements of the tile's rows
      for (int piece = int(threadIdx.x); piece < 4 * P; piece += 128) {
        const int64_t e = e0 + 4 * piece;
        const int64_t valid = min(int64_t(4), max(int64_t(0), e_end - e));
        cp_async16(sp + 12 * kDxRowsBytes + piece * 16, dproj + (valid > 0 ? e : 0), int(valid * 4));
      }
    }
    cp_async_commit();  // a group a tile, empty past the last: the wait below counts tiles
  };
  for (int i = 0; i < kDxRing - 1; ++i) stage(i);
  FragB<bf16> bh[KS][4], bl[KS][4];  // w rows p = 16 ks + 2t + {0, 1} (+ 8), column c0 + 8j + g
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int p = 16 * ks + 2 * t + (e & 1) + 8 * (e >> 1);
        v[e] = active && p < P ? __ldg(w + int64_t(p) * D + c0 + 8 * j + g) : 0.0f;
      }
      split2(v[0], v[1], bh[ks][j].r[0], bl[ks][j].r[0]);
      split2(v[2], v[3], bh[ks][j].r[1], bl[ks][j].r[1]);
    }
  // The per-row terms of this lane's row, one tile ahead.
  auto row_terms = [&](int i, float& hp, float& sc) {
    const int64_t row = t_begin + 16 * int64_t(i) + my_row;
    if (active && i < tiles && row < t_end) {
      hp = st.h_pre[row * st.n + stream];
      sc = st.scale(row, D);
    }
  };
  float hp = 0.0f, sc = 0.0f, hp_next = 0.0f, sc_next = 0.0f;
  row_terms(0, hp, sc);
  Acc dw_acc[kDw ? KS : 1][4] = {};  // dw rows p = 16 mi + g (+ 8), columns c0 + 8j + 2t (+ 1)
  for (int i = 0; i < tiles; ++i) {
    stage(i + kDxRing - 1);
    row_terms(i + 1, hp_next, sc_next);
    cp_async_wait<kDxRing - 1>();
    __syncthreads();  // every thread's copies of tile i are in
    const uint8_t* sp = dx_smem + (i % kDxRing) * dx_stage_bytes(P);
    const uint8_t* mine = sp + warp * 3 * kDxRowsBytes;
    const float* sdp = reinterpret_cast<const float*>(sp + 12 * kDxRowsBytes);
    const int64_t row = t_begin + 16 * int64_t(i) + my_row;
    if (active && kDw) {  // dw += dproj^T x over the tile's 16 tokens (rows past t_end were zero-filled)
      FragB<bf16> xb[2][2];
      load_b2<false>(xb[0], reinterpret_cast<const bf16*>(mine + kDxRowsBytes), 32, 0, 0);
      load_b2<false>(xb[1], reinterpret_cast<const bf16*>(mine + kDxRowsBytes), 32, 0, 16);
#pragma unroll
      for (int mi = 0; mi < (kDw ? KS : 1); ++mi) {
        FragA<bf16> ah, al;
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // A register q: p = 16 mi + g + 8 (q & 1), tokens 2t + 8 (q >> 1) + {0, 1}
          const int p = 16 * mi + g + 8 * (q & 1), k = 2 * t + 8 * (q >> 1);
          const float d0 = p < P ? sdp[k * P + p] : 0.0f, d1 = p < P ? sdp[(k + 1) * P + p] : 0.0f;
          split2(d0, d1, ah.r[q], al.r[q]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          mma(dw_acc[mi][j], ah, xb[j / 2][j % 2]);
          mma(dw_acc[mi][j], al, xb[j / 2][j % 2]);
        }
      }
    }
    if (active) {
      Acc acc[4] = {};
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        FragA<bf16> ah, al;
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // A register q: row g + 8 (q & 1), p = 16 ks + 2t + 8 (q >> 1) + {0, 1}
          const int r = g + 8 * (q & 1), p = 16 * ks + 2 * t + 8 * (q >> 1);
          const float d0 = p < P ? sdp[r * P + p] : 0.0f, d1 = p + 1 < P ? sdp[r * P + p + 1] : 0.0f;
          split2(d0, d1, ah.r[q], al.r[q]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          mma(acc[j], ah, bh[ks][j]);
          mma(acc[j], ah, bl[ks][j]);
          mma(acc[j], al, bh[ks][j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(tile + (g + 8 * h) * kDxPitch + 8 * j + 2 * t) =
              make_float2(acc[j].v[2 * h], acc[j].v[2 * h + 1]);
      __syncwarp();
      if (row < t_end) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int at = my_row * 64 + my_col * 2 + 16 * k;  // bytes into a bf16 tile
          float o[8], xf[8], gf[8];
          unpack16(*reinterpret_cast<const uint4*>(mine + at), o, dx);
          unpack16(*reinterpret_cast<const uint4*>(mine + kDxRowsBytes + at), xf, x);
          unpack16(*reinterpret_cast<const uint4*>(mine + 2 * kDxRowsBytes + at), gf, du);
          const float4 p0 = *reinterpret_cast<const float4*>(tile + my_row * kDxPitch + my_col + 8 * k);
          const float4 p1 = *reinterpret_cast<const float4*>(tile + my_row * kDxPitch + my_col + 8 * k + 4);
          const float pr[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
          for (int e = 0; e < 8; ++e) o[e] += hp * gf[e] + pr[e] + sc * xf[e];
          reinterpret_cast<uint4*>(dx + row * D + c0 + my_col)[k] = pack16(o, dx);
        }
      }
    }
    hp = hp_next;
    sc = sc_next;
    __syncthreads();  // the stage and the product tiles are rewritten by the next steps
  }
  cp_async_wait_all();
  if (!kDw || !active) return;
  float* out = part + int64_t(blockIdx.y) * P * D;
#pragma unroll
  for (int mi = 0; mi < (kDw ? KS : 1); ++mi)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int p = 16 * mi + g + 8 * (e / 2);
        if (p < P) out[p * D + c0 + 8 * j + 2 * t + e % 2] = dw_acc[mi][j].v[e];
      }
}

// dw on the tensor cores for bf16 streams (as dx's kernel): part (kDwSplit, P, D), part[s][p, d] = the sum over part s
// of the tokens of dproj[t, p] x[t, d], with dproj split into two bf16 terms (x is exact in bf16: two products). A
// block of 4 warps takes 128 columns and one part of the tokens, 32 tokens a step staged into shared memory by
// cp.async (two buffers: the next step loads while this one multiplies); warp q takes columns 32q .. 32q + 31 (4 n
// tiles, B fragments by ldmatrix .trans) and every p (MT m tiles of 16, A = dproj^T read from global memory).
constexpr int kDwCols = 128, kDwStep = 32, kDwPitch = kDwCols + 8;

template <int MT>
__global__ void __launch_bounds__(128)
    proj_dw_tc_kernel(float* part, const float* dproj, const __nv_bfloat16* x, int64_t N, int64_t D, int P) {
  __shared__ __align__(16) __nv_bfloat16 xs[2][kDwStep * kDwPitch];
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, n0 = threadIdx.x / 32 * 32;
  const int64_t c0 = int64_t(blockIdx.x) * kDwCols;
  int64_t t_lo, t_hi;
  segment(N, blockIdx.y, kDwSplit, t_lo, t_hi);
  const int cols_valid = int(min(int64_t(kDwCols), D - c0));
  auto stage = [&](int buf, int64_t s0) {
    stage_tile(xs[buf], kDwPitch, x + s0 * D + c0, D, kDwStep, kDwCols, int(min(int64_t(kDwStep), t_hi - s0)),
               cols_valid);
    cp_async_commit();
  };
  Acc acc[MT][4] = {};
  if (t_lo < t_hi) stage(0, t_lo);
  for (int64_t s0 = t_lo, step = 0; s0 < t_hi; s0 += kDwStep, ++step) {
    const int buf = int(step & 1);
    if (s0 + kDwStep < t_hi) stage(buf ^ 1, s0 + kDwStep);
    // The step's dproj values (A fragment register q of k half kh and m tile mi: p = 16 mi + g + 8 (q & 1), tokens
    // s0 + 16 kh + 2t + 8 (q >> 1) + {0, 1}), loaded while the staged x arrives.
    float dp[2][MT][4][2];
#pragma unroll
    for (int kh = 0; kh < 2; ++kh)
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int p = 16 * mi + g + 8 * (q & 1);
          const int64_t tok = s0 + 16 * kh + 2 * t + 8 * (q >> 1);
          dp[kh][mi][q][0] = p < P && tok < t_hi ? __ldg(dproj + tok * P + p) : 0.0f;
          dp[kh][mi][q][1] = p < P && tok + 1 < t_hi ? __ldg(dproj + (tok + 1) * P + p) : 0.0f;
        }
    if (s0 + kDwStep < t_hi)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
      FragB<bf16> b[2][2];  // n tile j = 2 b[j / 2][j % 2]
      load_b2<false>(b[0], xs[buf], kDwPitch, 16 * kh, n0);
      load_b2<false>(b[1], xs[buf], kDwPitch, 16 * kh, n0 + 16);
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        FragA<bf16> ah, al;
#pragma unroll
        for (int q = 0; q < 4; ++q) split2(dp[kh][mi][q][0], dp[kh][mi][q][1], ah.r[q], al.r[q]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          mma(acc[mi][j], ah, b[j / 2][j % 2]);
          mma(acc[mi][j], al, b[j / 2][j % 2]);
        }
      }
    }
    __syncthreads();  // the buffer is refilled by the step after next
  }
  float* out = part + int64_t(blockIdx.y) * P * D;
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int p = 16 * mi + g + 8 * (e / 2);
        const int64_t c = c0 + n0 + 8 * j + 2 * t + e % 2;
        if (p < P && c < D) out[p * D + c] = acc[mi][j].v[e];
      }
}

// out[e] += the `parts` parts' element e, added in part order.
__global__ void sum_parts_kernel(float* out, const float* part, int parts, int64_t count) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count; e += int64_t(gridDim.x) * blockDim.x) {
    float s = part[e];
    for (int q = 1; q < parts; ++q) s += part[q * count + e];
    out[e] += s;
  }
}

// The forward's end in one launch: proj (N,P) = the parts' sums, and rms[t] = sqrt(the parts' squares of token t) /
// sqrt(D), each added in part order (elements N P .. N P + N - 1 of the range are the tokens' rms).
__global__ void proj_finish_kernel(float* proj, float* rms, const float* part, const float* part_ss, int parts,
                                   int64_t N, int64_t P, int64_t D) {
  const int64_t count = N * P;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count + N;
       e += int64_t(gridDim.x) * blockDim.x) {
    if (e < count) {
      float s = part[e];
      for (int q = 1; q < parts; ++q) s += part[q * count + e];
      proj[e] = s;
    } else {
      const int64_t t = e - count;
      float s = part_ss[t];
      for (int q = 1; q < parts; ++q) s += part_ss[q * N + t];
      rms[t] = sqrtf(s) / sqrtf(float(D));
    }
  }
}

// dx[t, d] += sum_p dproj[t, p] w[p, d] + the stream terms for the block's 16 tokens and 512 columns, two adjacent
// columns a thread.
template <class T>
__global__ void __launch_bounds__(kThreads)
    streams_dx_kernel(T* dx, const float* dproj, const float* w, const T* x, const T* du, StreamTerms st, int64_t N,
                      int64_t D, int P) {
  extern __shared__ float dps[];  // [kDxTokens][P4]: rows padded with zeros to whole float4s
  const int P4 = (P + 3) / 4 * 4;
  const int64_t t0 = int64_t(blockIdx.x) * kDxTokens, d = (int64_t(blockIdx.y) * kThreads + threadIdx.x) * 2;
  for (int e = threadIdx.x; e < kDxTokens * P4; e += kThreads) {
    const int64_t t = t0 + e / P4;
    const int p = e % P4;
    dps[e] = t < N && p < P ? dproj[t * P + p] : 0.0f;
  }
  __syncthreads();
  if (d >= D) return;
  const bool two = d + 1 < D;
  float acc[kDxTokens][2] = {};
  for (int p = 0; p < P4; p += 4) {
    float wv[4][2];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      wv[q][0] = p + q < P ? w[(p + q) * D + d] : 0.0f;
      wv[q][1] = p + q < P && two ? w[(p + q) * D + d + 1] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kDxTokens; ++i) {
      const float4 g = *reinterpret_cast<const float4*>(dps + i * P4 + p);  // p in order: x, y, z, w
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        acc[i][c] += g.x * wv[0][c];
        acc[i][c] += g.y * wv[1][c];
        acc[i][c] += g.z * wv[2][c];
        acc[i][c] += g.w * wv[3][c];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kDxTokens; ++i) {
    const int64_t t = t0 + i;
    if (t >= N) continue;
    const float sc = st.scale(t, D);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (c == 1 && !two) continue;
      const int64_t e = d + c, stream = e / st.C;
      const float v =
          st.h_pre[t * st.n + stream] * float(du[t * st.C + e - stream * st.C]) + acc[i][c] + sc * float(x[t * D + e]);
      T& o = dx[t * D + e];
      o = T(float(o) + v);
    }
  }
}

// part (kDwSplit, P, D): part[s][p, d] = sum over the tokens of part s of dproj[t, p] x[t, d]. Warp pg takes the
// outputs p = pg + 8 j (j < J), lane l the CW columns l CW .. l CW + CW of the block's 32 CW.
template <class T, int J, int CW>
__global__ void __launch_bounds__(kThreads)
    proj_dw_kernel(float* part, const float* dproj, const T* x, int64_t N, int64_t D, int P) {
  constexpr int kCols = 32 * CW, PJ = 8 * J;
  extern __shared__ float sm[];
  float* xs = sm;                    // [kChunk][kCols]
  float* dps = sm + kChunk * kCols;  // [kChunk][PJ], outputs past P zero
  const int lane = threadIdx.x % 32, pg = threadIdx.x / 32;
  const int64_t c0 = int64_t(blockIdx.x) * kCols;
  int64_t t_lo, t_hi;
  segment(N, blockIdx.y, kDwSplit, t_lo, t_hi);
  float acc[J][CW] = {};
  for (int64_t s0 = t_lo; s0 < t_hi; s0 += kChunk) {
    for (int e = threadIdx.x; e < kChunk * kCols; e += kThreads) {
      const int64_t t = s0 + e / kCols, c = c0 + e % kCols;
      xs[e] = t < t_hi && c < D ? float(x[t * D + c]) : 0.0f;
    }
    for (int e = threadIdx.x; e < kChunk * PJ; e += kThreads) {
      const int64_t t = s0 + e / PJ;
      const int p = e % PJ;
      dps[e] = t < t_hi && p < P ? dproj[t * P + p] : 0.0f;
    }
    __syncthreads();
    for (int tk = 0; tk < kChunk; ++tk) add_row(acc, xs + tk * kCols, dps + tk * PJ, lane, pg);
    __syncthreads();
  }
  float* out = part + int64_t(blockIdx.y) * P * D;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int p = pg + 8 * j;
    if (p >= P) break;
#pragma unroll
    for (int q = 0; q < CW; ++q) {
      const int64_t c = c0 + lane * CW + q;
      if (c < D) out[p * D + c] = acc[j][q];
    }
  }
}

// f(J, CW) of the forward and dw kernels: J = ceil(P / 8) rounded up to 1, 3, 10 or 36 outputs a thread, over CW
// = 8 tokens (forward) or columns (dw), 2 for the largest J.
template <class F>
void with_tile(int64_t P, F&& f) {
  if (P <= 8)
    f(std::integral_constant<int, 1>{}, std::integral_constant<int, 8>{});
  else if (P <= 24)
    f(std::integral_constant<int, 3>{}, std::integral_constant<int, 8>{});
  else if (P <= 80)
    f(std::integral_constant<int, 10>{}, std::integral_constant<int, 8>{});
  else
    f(std::integral_constant<int, 36>{}, std::integral_constant<int, 2>{});
}

void check_sizes(const char* op, const Tensor& x, int64_t P) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", x.desc());
  HYTRA_CHECK(P >= 1 && P <= kMaxP, op, " on CUDA: at most ", kMaxP, " mapping outputs (n <= 16), got ", P);
  HYTRA_CHECK(x.size(0) < (int64_t(1) << 31) / kSplit, op, " on CUDA: too many tokens, ", x.size(0));
  HYTRA_CHECK(x.size(1) < int64_t(65535) * kThreads, op, " on CUDA: rows too long, ", x.size(1));
}

}  // namespace

void mhc_proj_fwd(Exec& ex, Tensor& proj, Tensor& rms, const Tensor& x, const Tensor& w) {
  const int64_t N = x.size(0), D = x.size(1), P = w.size(0);
  check_sizes("mhc_proj_fwd", x, P);
  if (N == 0) return;
  const cudaStream_t s = stream_of(ex);
  // The tensor-core grid has the token blocks of 64 in y (at most 65535).
  const bool tc = x.dtype() == DType::BF16 && P <= 80 && D % 32 == 0 && N <= int64_t(65535) * 64 &&
                  aligned16(x.raw()) && aligned16(w.raw());
  const int parts = tc ? kTcSplit : kSplit;
  Tensor part = Tensor::empty({parts, N, P}, DType::F32, Device::CUDA);  // (parts, N, P)
  Tensor part_ss = Tensor::empty({parts, N}, DType::F32, Device::CUDA);  // (parts, N)
  if (tc) {
    const dim3 grid(kTcSplit, unsigned((N + 63) / 64));
    auto launch = [&](auto j) {
      proj_fwd_tc_kernel<j.value><<<grid, 128, 0, s>>>(part.data<float>(), part_ss.data<float>(),
                                                       static_cast<const __nv_bfloat16*>(x.raw()), w.data<float>(), N,
                                                       D, int(P));
    };
    if (P <= 8)
      launch(std::integral_constant<int, 1>{});
    else if (P <= 24)
      launch(std::integral_constant<int, 3>{});
    else
      launch(std::integral_constant<int, 10>{});
    check_launch("proj_fwd_tc_kernel");
  } else {
    with_type(x.dtype(), [&](auto t) {
      using T = decltype(t);
      with_tile(P, [&](auto j, auto cw) {
        const int64_t tokens = 32 * cw.value;
        const dim3 grid(unsigned((N + tokens - 1) / tokens), kSplit);
        const size_t smem = size_t(kChunk) * (tokens + 4 + 8 * j.value) * sizeof(float);
        proj_fwd_kernel<T, j.value, cw.value><<<grid, kThreads, smem, s>>>(
            part.data<float>(), part_ss.data<float>(), static_cast<const T*>(x.raw()), w.data<float>(), N, D, int(P));
      });
    });
    check_launch("proj_fwd_kernel");
  }
  proj_finish_kernel<<<grid_for(N * P + N, kThreads), kThreads, 0, s>>>(
      proj.data<float>(), rms.data<float>(), part.data<float>(), part_ss.data<float>(), parts, N, P, D);
  check_launch("proj_finish_kernel");
}

void mhc_streams_bwd(Exec& ex, Tensor& dX, Tensor& dw, const Tensor& dproj, const Tensor& dr, const Tensor& r,
                     const Tensor& rms, const Tensor& du, const Tensor& h_pre, const Tensor& X, const Tensor& w) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2), D = n * C, P = w.size(0);
  const Tensor x = X.view({N, D});
  check_sizes("mhc_streams_bwd", x, P);
  if (N == 0) return;
  const cudaStream_t s = stream_of(ex);
  const StreamTerms st{dr.data<float>(), r.data<float>(), rms.data<float>(), h_pre.data<float>(), int(n), C};
  Tensor part = Tensor::empty({kDwSplit, P, D}, DType::F32, Device::CUDA);  // (kDwSplit, P, D)
  if (x.dtype() == DType::BF16 && P <= 80 && C % 32 == 0 && aligned16(x.raw()) && aligned16(dX.raw()) &&
      aligned16(du.raw())) {
    const dim3 dx_grid(unsigned(D / 128 + (D % 128 != 0)), kDwSplit);
    const dim3 dw_grid(unsigned((D + kDwCols - 1) / kDwCols), kDwSplit);
    const auto* xb = static_cast<const __nv_bfloat16*>(x.raw());
    const size_t dx_smem = size_t(dx_smem_bytes(int(P)));
    auto launch = [&](auto k, auto fuse_dw) {  // k: P in tiles of 16; fuse_dw: dw summed by the dx kernel
      constexpr int KS = decltype(k)::value;
      constexpr bool kDw = decltype(fuse_dw)::value;
      static std::once_flag once;
      std::call_once(once, [] {
        cuda_check(cudaFuncSetAttribute(streams_dx_tc_kernel<KS, kDw>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        dx_smem_bytes(80)),
                   "streams_dx_tc_kernel shared memory");
      });
      streams_dx_tc_kernel<KS, kDw><<<dx_grid, 128, dx_smem, s>>>(
          static_cast<__nv_bfloat16*>(dX.raw()), part.data<float>(), dproj.data<float>(), w.data<float>(), xb,
          static_cast<const __nv_bfloat16*>(du.raw()), st, N, D, int(P));
      check_launch("streams_dx_tc_kernel");
      if constexpr (!kDw) {
        proj_dw_tc_kernel<KS><<<dw_grid, 128, 0, s>>>(part.data<float>(), dproj.data<float>(), xb, N, D, int(P));
        check_launch("proj_dw_tc_kernel");
      }
    };
    if (P <= 16)
      launch(std::integral_constant<int, 1>{}, std::true_type{});
    else if (P <= 32)
      launch(std::integral_constant<int, 2>{}, std::true_type{});
    else  // n > 4: dw's accumulators would not fit beside dx's
      launch(std::integral_constant<int, 5>{}, std::false_type{});
  } else {
    const dim3 dx_grid(unsigned((N + kDxTokens - 1) / kDxTokens), unsigned((D + 2 * kThreads - 1) / (2 * kThreads)));
    const size_t dx_smem = size_t(kDxTokens) * ((P + 3) / 4 * 4) * sizeof(float);
    with_type(x.dtype(), [&](auto t) {
      using T = decltype(t);
      streams_dx_kernel<T><<<dx_grid, kThreads, dx_smem, s>>>(static_cast<T*>(dX.raw()), dproj.data<float>(),
                                                              w.data<float>(), static_cast<const T*>(x.raw()),
                                                              static_cast<const T*>(du.raw()), st, N, D, int(P));
      check_launch("streams_dx_kernel");
      with_tile(P, [&](auto j, auto cw) {
        const int64_t cols = 32 * cw.value;
        const dim3 grid(unsigned((D + cols - 1) / cols), kDwSplit);
        const size_t smem = size_t(kChunk) * (cols + 8 * j.value) * sizeof(float);
        proj_dw_kernel<T, j.value, cw.value><<<grid, kThreads, smem, s>>>(part.data<float>(), dproj.data<float>(),
                                                                          static_cast<const T*>(x.raw()), N, D, int(P));
      });
      check_launch("proj_dw_kernel");
    });
  }
  sum_parts_kernel<<<grid_for(P * D, kThreads), kThreads, 0, s>>>(dw.data<float>(), part.data<float>(), kDwSplit,
                                                                  P * D);
  check_launch("sum_parts_kernel");
}

}  // namespace hytra::cuda
