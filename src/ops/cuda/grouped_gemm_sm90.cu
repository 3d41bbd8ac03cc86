// The Hopper grouped GEMM (grouped_gemm_sm90.h). One persistent kernel per call, one block per SM:
//  - Tiles: 128 x 256 outputs (Glu: 128 rows x 128 activation columns, whose 256 gate and linear h
//    columns are loaded as the B tile), K in steps of 64. Row modes (Forward, Dgrad, Glu): group e owns
//    ceil(rows_e / 128) x (column tiles) tiles; a tile's last rows may belong to the next group: they
//    are computed and not stored. Wgrad: group e owns every tile of its dw_e (none when it has no rows
//    and beta = 1) and contracts over its own rows; the rows of the last 64-row step past the group's
//    end are zeroed in shared memory before the MMA. The blocks walk the tile list (groups in order,
//    columns fastest) with a stride of the grid; every block builds the list from the offsets itself.
//  - Warp roles: warpgroup 2 (one thread) issues the TMA loads into a ring of 48 KB stages; warpgroups 0
//    and 1 each own 64 of the tile's rows and run m64n256k16 wgmma on them, keeping one MMA batch in
//    flight. bf16 outputs, and Wgrad's fp32 ones with beta 1, leave through shared memory in 8 KB chunks
//    (Stager): TMA stores (Wgrad: TMA adds) that overlap the next tile, or row-by-row copies where a TMA
//    store cannot express the destination (rows of the next group, scattered GLU columns); Wgrad with
//    beta 0 stores whole 32-byte sectors straight from registers. Glu computes the activation from the
//    bf16-rounded h values with moe_act_fwd's formula, so the fused and unfused paths agree bitwise.
//  - Deterministic: each output element is written (or, Wgrad with beta 1, added to) once.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/cuda_check_cuda.h"
#include "core/error.h"
#include "ops/cuda/expert_act.cuh"
#include "ops/cuda/grouped_gemm_sm90.h"
#include "ops/cuda/sm90.cuh"

namespace hytra::cuda {
namespace {

using namespace sm90;
using bf16_t = __nv_bfloat16;

// The Hopper code exists in the host pass and the sm_90a device pass only: the passes for other architectures
// compile the kernel empty (never launched there, device_info()) and leave its helpers out.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HYTRA_SM90A_CODE 1
#else
#define HYTRA_SM90A_CODE 0
#endif

constexpr int BM = 128, BN = 256, BK = 64, kStages = 4, kThreads = 384, kMaxGroups = 256;
constexpr int kStageA = BM * BK, kStageB = BN * BK;  // elements
constexpr uint32_t kStageBytes = (kStageA + kStageB) * 2;
// Output staging (Stager): per consumer warpgroup two 8 KB buffers of 64 rows x 128 bytes (32 fp32 or 64 bf16,
// one 128-byte swizzled line a row), stored by TMA while the MMAs of the next tile run.
constexpr int kChunkCols = 32, kChunkBytes = 64 * kChunkCols * 4;
constexpr int kStagingBytes = 2 * 2 * kChunkBytes;
constexpr int kSmemBytes = kStages * int(kStageBytes) + kStagingBytes + 1024 + 2 * kStages * 8 + (kMaxGroups + 1) * 4;

struct Params {
  GroupedGemmArgs g;
  int mt, nt;  // tiles across the output rows (Wgrad) and columns
  int kt;      // row modes: K steps
  int piece;   // Glu: B rows per TMA box
};

struct Tile {
  int e, m, n, kt;
  int r0, r1;   // row modes: the tile's first row and the group's end; Wgrad: the group's rows
  int glu_row;  // Glu: the weight row of activation column f = n*128's gate, f / I * 2I + f % I
};

// Group e's rows [offsets[e], offsets[e+1]), clipped to R (bad offsets must not send a tile past the tensors).
#if HYTRA_SM90A_CODE
constexpr int kBox = 64 * 64;  // elements of one 64-line box

__device__ __forceinline__ int group_end(const Params& p, int e) {
  return int(min(int64_t(p.g.offsets[e + 1]), p.g.R));
}

__device__ __forceinline__ int tiles_of(const Params& p, int e) {
  const int rows = max(group_end(p, e) - p.g.offsets[e], 0);
  if (p.g.mode == GroupedMode::Wgrad) return rows > 0 || p.g.beta == 0.0f ? p.mt * p.nt : 0;
  return (rows + BM - 1) / BM * p.nt;
}

__device__ __forceinline__ Tile decode(const Params& p, const int* prefix, int t) {
  const int lo = last_at_most(prefix, p.g.E, t);  // the last group whose first tile is <= t
  Tile tl;
  tl.e = lo;
  const int local = t - prefix[lo];
  tl.m = local / p.nt;
  tl.n = local % p.nt;
  const int g0 = p.g.offsets[lo], g1 = group_end(p, lo);
  tl.r1 = g1;
  if (p.g.mode == GroupedMode::Wgrad) {
    tl.r0 = g0;
    tl.kt = (g1 - g0 + BK - 1) / BK;
  } else {
    tl.r0 = g0 + tl.m * BM;
    tl.kt = p.kt;
    // Pieces of P = min(I, 128) columns: I < 128 divides 128, piece q's gate row is then glu_row + 2 q I.
    const int f = tl.n * (BN / 2);
    tl.glu_row = p.g.I > 0 ? f / p.g.I * 2 * p.g.I + f % p.g.I : 0;
  }
  return tl;
}

// The TMA loads of K step k of tile tl into stage (sa, sb).
template <GroupedMode MODE>
__device__ __forceinline__ void load_stage(const Params& p, const CUtensorMap* ta, const CUtensorMap* tb, uint64_t* bar,
                                           bf16_t* sa, bf16_t* sb, const Tile& tl, int k) {
  if constexpr (MODE == GroupedMode::Wgrad) {
    const int r = tl.r0 + k * BK;
    for (int j = 0; j < BM / 64; ++j) tma_load_2d(sa + j * kBox, ta, bar, tl.m * BM + 64 * j, r);
    for (int j = 0; j < BN / 64; ++j) tma_load_2d(sb + j * kBox, tb, bar, tl.n * BN + 64 * j, r);
  } else {
    tma_load_2d(sa, ta, bar, k * BK, tl.r0);
    if constexpr (MODE == GroupedMode::Forward) {
      tma_load_3d(sb, tb, bar, k * BK, tl.n * BN, tl.e);
    } else if constexpr (MODE == GroupedMode::Dgrad) {
      for (int j = 0; j < BN / 64; ++j) tma_load_3d(sb + j * kBox, tb, bar, tl.n * BN + 64 * j, k * BK, tl.e);
    } else {  // Glu: gate rows then linear rows of activation columns [n*128, n*128 + 128), from tl.glu_row
      const int I = p.g.I, P = p.piece;
      for (int half = 0; half < 2; ++half)
        for (int q = 0; q < BN / 2 / P; ++q)
          tma_load_3d(sb + (half * (BN / 2) + q * P) * BK, tb, bar, k * BK, tl.glu_row + 2 * q * P + half * I, tl.e);
    }
  }
}

// Wgrad: zeroes the lines of rows >= valid in every box of the stage (rows past the group's end).
__device__ __forceinline__ void zero_tail(bf16_t* sa, bf16_t* sb, int valid) {
  const int lines = 64 - valid, per_box = lines * 8;  // 16-byte chunks
  for (int i = int(threadIdx.x); i < (BM / 64 + BN / 64) * per_box; i += 256) {
    const int box = i / per_box, rem = i % per_box;
    bf16_t* b = box < BM / 64 ? sa + box * kBox : sb + (box - BM / 64) * kBox;
    reinterpret_cast<uint4*>(b + (valid + rem / 8) * 64)[rem % 8] = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async();
  named_barrier(1, 256);
}

// One warpgroup's output path through shared memory: chunks of its 64 rows x 128 bytes (fp32: 32 columns,
// bf16: 64) written in the TMA's 128-byte swizzle into two alternating staging buffers, then flushed: stored (or
// added) by one TMA operation while the warpgroup goes on, or copied row by row by the warpgroup (rows past the
// group's end, scattered GLU columns). One barrier a chunk: before it, the issuing thread waits until the
// previous chunk's TMA store has read its buffer, the one the next chunk writes. `count` (kept by the caller
// across tiles) picks the buffer.
struct Stager {
  uint8_t* bufs;
  int t, lane, warp, wg;
  __device__ __forceinline__ Stager(uint8_t* staging, int wg_)
      : bufs(staging + wg_ * 2 * kChunkBytes), t(int(threadIdx.x) & 127), lane(t & 31), warp(t >> 5), wg(wg_) {}
  // val(i, jj): the thread's two values of fragment row warp*16 + lane/4 + 8i, 8-column group jj of the chunk;
  // flush(buf): run by every thread of the warpgroup once the chunk is in buf.
  template <bool F32, class Val, class Flush>
  __device__ __forceinline__ void chunk(int& count, Val val, Flush flush) {
    uint8_t* buf = bufs + (count++ & 1) * kChunkBytes;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = warp * 16 + lane / 4 + 8 * i;
#pragma unroll
      for (int jj = 0; jj < (F32 ? 4 : 8); ++jj) {
        const float2 v = val(i, jj);
        if constexpr (F32) {
          const int q = 2 * jj + (lane & 3) / 2;  // 16-byte chunk of the line
          *reinterpret_cast<float2*>(buf + row * 128 + ((q ^ (row & 7)) * 16) + 8 * (lane & 1)) = v;
        } else {
          *reinterpret_cast<__nv_bfloat162*>(buf + row * 128 + ((jj ^ (row & 7)) * 16) + 4 * (lane & 3)) =
              __floats2bfloat162_rn(v.x, v.y);
        }
      }
    }
    fence_proxy_async();
    if (t == 0) bulk_wait_read<0>();
    named_barrier(2 + wg, 128);
    flush(buf);
  }
  // A TMA flush: op(buf) issued by one thread.
  template <class Op>
  __device__ __forceinline__ void tma(const uint8_t* buf, Op op) const {
    if (t != 0) return;
    op(buf);
    bulk_commit();
  }
  // A copy flush of a bf16 chunk: row `row` of the chunk is row r0 + row of the output, kept when below r1;
  // dst(r, q) is where its 16-byte piece q goes (nullptr: nowhere).
  template <class Dst>
  __device__ __forceinline__ void copy(const uint8_t* buf, int r0, int r1, Dst dst) const {
    for (int i = t; i < 64 * 8; i += 128) {
      const int row = i >> 3, q = i & 7;
      if (r0 + row >= r1) continue;
      bf16_t* o = dst(r0 + row, q);
      if (o != nullptr)
        *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(buf + row * 128 + ((q ^ (row & 7)) * 16));
    }
  }
};

// Wgrad: warpgroup wg's 64 x 256 fp32 fragment of dw_e. beta 0: stored from registers (whole 32-byte sectors,
// nothing to wait for); beta 1: added by TMA in 8 chunks. Rows and columns past dw_e's end are left out.
__device__ __forceinline__ void wgrad_epilogue(const Params& p, const CUtensorMap* tc, const Tile& tl, const float* d,
                                               int wg, uint8_t* staging, int& count) {
  Stager st(staging, wg);
  const int r0 = tl.m * BM + wg * 64;
  if (p.g.beta == 0.0f) {
    const int N = p.g.N, K = p.g.K;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int m = r0 + st.warp * 16 + st.lane / 4 + 8 * i;
      if (m >= N) continue;
      float* out = static_cast<float*>(p.g.y) + (int64_t(tl.e) * N + m) * K;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int c = tl.n * BN + 8 * j + 2 * (st.lane & 3);
        if (c < K) *reinterpret_cast<float2*>(out + c) = make_float2(d[4 * j + 2 * i], d[4 * j + 2 * i + 1]);
      }
    }
    return;
  }
#pragma unroll
  for (int ch = 0; ch < BN / kChunkCols; ++ch)
    st.chunk<true>(
        count,
        [&](int i, int jj) { return make_float2(d[4 * (ch * 4 + jj) + 2 * i], d[4 * (ch * 4 + jj) + 2 * i + 1]); },
        [&](uint8_t* buf) {
          st.tma(buf, [&](const uint8_t* b) { tma_store_3d<true>(tc, b, tl.n * BN + ch * kChunkCols, r0, tl.e); });
        });
}

// Row modes: warpgroup wg's 64 rows of tile tl, bf16, through the staging buffers. Flushed by TMA (tc: y or
// Glu's h, td: Glu's y) when every row of the tile belongs to its group and, for Glu, I >= 128 (the tile's gate
// and linear columns are then two runs of 128); otherwise copied, rows past the group's end left out (they
// belong to the next group's tiles).
template <GroupedMode MODE, ops::ExpertActivation ACT, bool CLAMP>
__device__ __forceinline__ void rows_epilogue(const Params& p, const CUtensorMap* tc, const CUtensorMap* td,
                                              const Tile& tl, const float* d, int wg, uint8_t* staging, int& count) {
  Stager st(staging, wg);
  const int r0 = tl.r0 + wg * 64, N = p.g.N;
  const bool full = tl.r0 + BM <= tl.r1;
  auto frag = [&](int j, int i) { return make_float2(d[4 * j + 2 * i], d[4 * j + 2 * i + 1]); };
  if constexpr (MODE == GroupedMode::Glu) {
    const int F = N / 2, I = p.g.I, f0 = tl.n * (BN / 2);
    const bool tma = full && I >= BN / 2;
    const int rbase = r0 + st.warp * 16 + st.lane / 4;
    const float pr[2] = {rbase < tl.r1 ? p.g.probs[rbase] : 0.0f, rbase + 8 < tl.r1 ? p.g.probs[rbase + 8] : 0.0f};
    auto rounded = [&](int k) { return __bfloat162float(__float2bfloat16_rn(d[k])); };
    bf16_t* h = static_cast<bf16_t*>(p.g.h);
    bf16_t* y = static_cast<bf16_t*>(p.g.y);
    // h column of activation column f, gate (half 0) or linear (half 1): f / I * 2I + f % I (+ I).
    auto h_col = [&](int f, int half) { return f + f / I * I + half * I; };
#pragma unroll
    for (int ch = 0; ch < 2; ++ch) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
        st.chunk<false>(
            count, [&](int i, int jj) { return frag(ch * 8 + jj + half * (BN / 16), i); },
            [&](uint8_t* buf) {
              if (tma)
                st.tma(buf, [&](const uint8_t* b) { tma_store_2d(tc, b, h_col(f0 + ch * 64, half), r0); });
              else
                st.copy(buf, r0, tl.r1, [&](int r, int q) -> bf16_t* {
                  const int f = f0 + ch * 64 + 8 * q;
                  return f < F ? h + int64_t(r) * N + h_col(f, half) : nullptr;
                });
            });
      st.chunk<false>(  // y = act(gate) * linear * p from the bf16-rounded h values
          count,
          [&](int i, int jj) {
            const int kg = 4 * (ch * 8 + jj) + 2 * i, ku = kg + 4 * (BN / 16);
            float v[2];
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              if constexpr (CLAMP) {
                const Glu in(rounded(kg + b), rounded(ku + b), p.g.offset, p.g.clamp);
                v[b] = act_value(ACT, in.g) * in.u * pr[i];
              } else {  // Glu's result for clamp <= 0 and offset 0 (the + 0 turns -0 into +0 as Glu's sum does)
                v[b] = act_value(ACT, rounded(kg + b)) * (rounded(ku + b) + 0.0f) * pr[i];
              }
            }
            return make_float2(v[0], v[1]);
          },
          [&](uint8_t* buf) {
            if (tma)
              st.tma(buf, [&](const uint8_t* b) { tma_store_2d(td, b, f0 + ch * 64, r0); });
            else
              st.copy(buf, r0, tl.r1, [&](int r, int q) -> bf16_t* {
                const int f = f0 + ch * 64 + 8 * q;
                return f < F ? y + int64_t(r) * F + f : nullptr;
              });
          });
    }
  } else {
    bf16_t* y = static_cast<bf16_t*>(p.g.y);
#pragma unroll
    for (int ch = 0; ch < BN / 64; ++ch)
      st.chunk<false>(
          count, [&](int i, int jj) { return frag(ch * 8 + jj, i); },
          [&](uint8_t* buf) {
            const int c0 = tl.n * BN + ch * 64;
            if (full)
              st.tma(buf, [&](const uint8_t* b) { tma_store_2d(tc, b, c0, r0); });
            else
              st.copy(buf, r0, tl.r1, [&](int r, int q) -> bf16_t* {
                return c0 + 8 * q < N ? y + int64_t(r) * N + c0 + 8 * q : nullptr;
              });
          });
  }
}

#endif  // HYTRA_SM90A_CODE

template <GroupedMode MODE, ops::ExpertActivation ACT, bool CLAMP>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                        const __grid_constant__ CUtensorMap tc, const __grid_constant__ CUtensorMap td,
                        const Params p) {
#if !HYTRA_SM90A_CODE
  return;  // built for another architecture: never launched (device_info().sm90a is false)
#else
  constexpr int TA = MODE == GroupedMode::Wgrad ? 1 : 0;
  constexpr int TB = MODE == GroupedMode::Dgrad || MODE == GroupedMode::Wgrad ? 1 : 0;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16_t* sa = reinterpret_cast<bf16_t*>(base);
  bf16_t* sb = sa + kStages * kStageA;
  uint8_t* staging = reinterpret_cast<uint8_t*>(sb + kStages * kStageB);
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + kStagingBytes);
  uint64_t* empty = full + kStages;
  int* prefix = reinterpret_cast<int*>(empty + kStages);
  const int E = p.g.E;
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int e = 0; e < E; ++e) {
      prefix[e] = acc;
      acc += tiles_of(p, e);
    }
    prefix[E] = acc;
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    fence_barrier_init();
  }
  __syncthreads();
  const int total = prefix[E], wg = int(threadIdx.x) / 128;
  if (wg == 2) {  // producer
    regs_dec<40>();
    if (threadIdx.x != 256) return;
    int it = 0;
    for (int t = int(blockIdx.x); t < total; t += int(gridDim.x)) {
      const Tile tl = decode(p, prefix, t);
      for (int k = 0; k < tl.kt; ++k, ++it) {
        const int s = it % kStages;
        mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
        mbar_expect_tx(&full[s], kStageBytes);
        load_stage<MODE>(p, &ta, &tb, &full[s], sa + s * kStageA, sb + s * kStageB, tl, k);
      }
    }
    return;
  }
  regs_inc<232>();
  float d[128];
  int it = 0, staged = 0;  // K steps consumed; output chunks staged
  for (int t = int(blockIdx.x); t < total; t += int(gridDim.x)) {
    const Tile tl = decode(p, prefix, t);
    if (tl.kt == 0) {
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    }
    for (int k = 0; k < tl.kt; ++k, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      bf16_t* a = sa + s * kStageA;
      bf16_t* b = sb + s * kStageB;
      if constexpr (MODE == GroupedMode::Wgrad) {
        const int valid = tl.r1 - (tl.r0 + k * BK);
        if (valid < BK) zero_tail(a, b, valid);
      }
      fence_regs<128>(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // A: this warpgroup's 64 rows; K-major steps 16 elements along the line, MN-major 16 lines.
        const uint64_t da =
            TA ? smem_desc(a + wg * kBox + kk * 16 * 64, 8192, 1024) : smem_desc(a + wg * 64 * BK + kk * 16, 16, 1024);
        const uint64_t db = TB ? smem_desc(b + kk * 16 * 64, 8192, 1024) : smem_desc(b + kk * 16, 16, 1024);
        wgmma_m64n256k16<TA, TB>(d, da, db, k > 0 || kk > 0);
      }
      wgmma_commit();
      fence_regs<128>(d);
      wgmma_wait<1>();
      if (k > 0 && threadIdx.x % 128 == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
    fence_regs<128>(d);
    if (tl.kt > 0 && threadIdx.x % 128 == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    if constexpr (MODE == GroupedMode::Wgrad)
      wgrad_epilogue(p, &tc, tl, d, wg, staging, staged);
    else
      rows_epilogue<MODE, ACT, CLAMP>(p, &tc, &td, tl, d, wg, staging, staged);
  }
  if (threadIdx.x % 128 == 0) bulk_wait_all();
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    cuda_check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    HYTRA_CHECK(q == cudaDriverEntryPointSuccess && f != nullptr,
                "grouped GEMM: the CUDA driver does not provide cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A tensor map with the 128-byte swizzle over bf16 (or, f32, fp32) data: dims innermost first, row pitches in
// elements.
CUtensorMap tensor_map(const void* ptr, int rank, const uint64_t* dims, const uint64_t* pitches, const uint32_t* box,
                       bool f32 = false) {
  CUtensorMap m;
  cuuint64_t gd[3], gs[2];
  cuuint32_t bx[3], es[3] = {1, 1, 1};
  for (int i = 0; i < rank; ++i) {
    gd[i] = dims[i];
    bx[i] = box[i];
    if (i + 1 < rank) gs[i] = pitches[i] * (f32 ? 4 : 2);
  }
  const CUresult r =
      encode_tiled()(&m, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, cuuint32_t(rank),
                     const_cast<void*>(ptr), gd, gs, bx, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HYTRA_CHECK(r == CUDA_SUCCESS, "grouped GEMM: cuTensorMapEncodeTiled failed (error ", int(r), ")");
  return m;
}

// sm90a: the device is a Hopper, the kernel was built for it (its wgmma code exists only in an sm_90a
// build; a build for another architecture compiles it empty) and HYTRA_PORTABLE_KERNELS=1 does not ask for the
// portable kernels (how the parity tests check, on a Hopper, the path other GPUs take).
struct DeviceInfo {
  bool sm90a = false;
  int sms = 0;
};
const DeviceInfo& device_info() {
  static DeviceInfo info = [] {
    DeviceInfo d;
    int dev = 0, major = 0;
    cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
    cuda_check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    cudaFuncAttributes attr{};
    const bool built =
        cudaFuncGetAttributes(&attr, grouped_gemm_kernel<GroupedMode::Forward, ops::ExpertActivation::SwiGLU, false>) ==
        cudaSuccess;
    cudaGetLastError();  // a kernel without code for this device is a fallback, not an error
    const char* portable = std::getenv("HYTRA_PORTABLE_KERNELS");
    const bool forced = portable != nullptr && std::string(portable) == "1";
    HYTRA_CHECK(portable == nullptr || forced || std::string(portable) == "0" || std::string(portable).empty(),
                "HYTRA_PORTABLE_KERNELS: expected 1 (the portable kernels on every GPU) or 0, got '", portable, "'");
    d.sm90a = major == 9 && built && attr.binaryVersion == 90 && !forced;
    return d;
  }();
  return info;
}

template <GroupedMode MODE, ops::ExpertActivation ACT = ops::ExpertActivation::SwiGLU, bool CLAMP = false>
void launch(const CUtensorMap& ta, const CUtensorMap& tb, const CUtensorMap& tc, const CUtensorMap& td, const Params& p,
            cudaStream_t s) {
  static std::once_flag once;
  std::call_once(once, [] {
    cuda_check(cudaFuncSetAttribute(grouped_gemm_kernel<MODE, ACT, CLAMP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kSmemBytes),
               "grouped_gemm_kernel shared memory");
  });
  grouped_gemm_kernel<MODE, ACT, CLAMP><<<device_info().sms, kThreads, kSmemBytes, s>>>(ta, tb, tc, td, p);
  cuda_check(cudaGetLastError(), "grouped_gemm_kernel");
}

}  // namespace

bool grouped_gemm_sm90_fits(const GroupedGemmArgs& g) {
  if (!device_info().sm90a || g.E < 1 || g.E > kMaxGroups || g.R >= (int64_t(1) << 31)) return false;
  if (g.N % 8 != 0 || g.K % 8 != 0 || g.N <= 0 || g.K <= 0) return false;
  // The tile list's length (an int): at most (R / 128 + E) row tiles, or E (N / 128) in Wgrad, times the
  // column tiles.
  const int64_t col_tiles = g.mode == GroupedMode::Wgrad ? (g.K + BN - 1) / BN : (g.N + BN - 1) / BN;
  const int64_t row_tiles = g.mode == GroupedMode::Wgrad ? int64_t(g.E) * ((g.N + BM - 1) / BM) : g.R / BM + g.E;
  if (row_tiles * col_tiles >= (int64_t(1) << 31)) return false;
  if (!aligned16(g.a) || !aligned16(g.b) || !aligned16(g.y) || !aligned16(g.h)) return false;
  if (g.mode == GroupedMode::Glu) {
    const int I = g.I, F = g.N / 2;
    if (I % 8 != 0 || F % I != 0 || (I < BN / 2 ? (BN / 2) % I != 0 : I % (BN / 2) != 0)) return false;
  }
  return true;
}

void grouped_gemm_sm90(const GroupedGemmArgs& g, void* stream) {
  Params p{};
  p.g = g;
  const auto s = static_cast<cudaStream_t>(stream);
  const uint64_t R = uint64_t(g.R), N = uint64_t(g.N), K = uint64_t(g.K), E = uint64_t(g.E);
  switch (g.mode) {
    case GroupedMode::Wgrad: {
      p.mt = (g.N + BM - 1) / BM;
      p.nt = (g.K + BN - 1) / BN;
      const uint64_t da[2] = {N, R}, db[2] = {K, R}, dc[3] = {K, N, E}, pc[2] = {K, N * K};
      const uint32_t bx[2] = {64, 64}, bc[3] = {kChunkCols, 64, 1};
      const CUtensorMap tc = tensor_map(g.y, 3, dc, pc, bc, true);
      launch<GroupedMode::Wgrad>(tensor_map(g.a, 2, da, &N, bx), tensor_map(g.b, 2, db, &K, bx), tc, tc, p, s);
      break;
    }
    case GroupedMode::Dgrad: {  // w (E, K, N): N contiguous
      p.nt = (g.N + BN - 1) / BN;
      p.kt = (g.K + BK - 1) / BK;
      const uint64_t da[2] = {K, R}, db[3] = {N, K, E}, pb[2] = {N, K * N}, dy[2] = {N, R};
      const uint32_t ba[2] = {BK, BM}, bb[3] = {64, 64, 1}, by[2] = {64, 64};
      const CUtensorMap ty = tensor_map(g.y, 2, dy, &N, by);
      launch<GroupedMode::Dgrad>(tensor_map(g.a, 2, da, &K, ba), tensor_map(g.b, 3, db, pb, bb), ty, ty, p, s);
      break;
    }
    case GroupedMode::Forward: {  // w (E, N, K)
      p.nt = (g.N + BN - 1) / BN;
      p.kt = (g.K + BK - 1) / BK;
      const uint64_t da[2] = {K, R}, db[3] = {K, N, E}, pb[2] = {K, N * K}, dy[2] = {N, R};
      const uint32_t ba[2] = {BK, BM}, bb[3] = {BK, BN, 1}, by[2] = {64, 64};
      const CUtensorMap ty = tensor_map(g.y, 2, dy, &N, by);
      launch<GroupedMode::Forward>(tensor_map(g.a, 2, da, &K, ba), tensor_map(g.b, 3, db, pb, bb), ty, ty, p, s);
      break;
    }
    case GroupedMode::Glu: {  // w (E, 2F, K); tiles of 128 activation columns
      p.nt = (g.N / 2 + BN / 2 - 1) / (BN / 2);
      p.kt = (g.K + BK - 1) / BK;
      p.piece = g.I < BN / 2 ? g.I : BN / 2;
      const uint64_t da[2] = {K, R}, db[3] = {K, N, E}, pb[2] = {K, N * K}, dh[2] = {N, R}, F = N / 2, dy[2] = {F, R};
      const uint32_t ba[2] = {BK, BM}, bb[3] = {BK, uint32_t(p.piece), 1}, bo[2] = {64, 64};
      const CUtensorMap ta = tensor_map(g.a, 2, da, &K, ba), tb = tensor_map(g.b, 3, db, pb, bb);
      const CUtensorMap th = tensor_map(g.h, 2, dh, &N, bo), ty = tensor_map(g.y, 2, dy, &F, bo);
      constexpr auto kSwiGLU = ops::ExpertActivation::SwiGLU, kQuick = ops::ExpertActivation::QuickGeGLU;
      const bool quick = g.act == kQuick, clamp = g.clamp > 0.0f || g.offset != 0.0f;
      if (quick && clamp)
        launch<GroupedMode::Glu, kQuick, true>(ta, tb, th, ty, p, s);
      else if (quick)
        launch<GroupedMode::Glu, kQuick, false>(ta, tb, th, ty, p, s);
      else if (clamp)
        launch<GroupedMode::Glu, kSwiGLU, true>(ta, tb, th, ty, p, s);
      else
        launch<GroupedMode::Glu, kSwiGLU, false>(ta, tb, th, ty, p, s);
      break;
    }
  }
}

}  // namespace hytra::cuda
