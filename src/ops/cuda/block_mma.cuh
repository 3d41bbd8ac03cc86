// Block-level matrix products on shared-memory tiles, for the chunked scan kernels (gdn_*.cu), built
// on warp_mma.cuh's fragments, loads and tile copies.
// block_gemm(m, n, epi, prods...) computes C (m x n) = sum over prods of A (m x k) B (k x n) and hands
// each pair of neighbours to epi(row, col, C[row][col], C[row][col + 1]) (col even) exactly once, from
// one thread. Which thread gets a pair depends only on (m, n, first_warp) and the block size, and the
// sum runs in a fixed order: results are deterministic. block_gemm_from(first_warp, ...) starts the
// tile assignment at that warp, so two products issued back to back can run on different warps. It
// does not synchronise; callers put __syncthreads() between dependent steps.
// Layouts (Prod's flags; "k-major" as in warp_mma.cuh: k contiguous): A k-major a[m*lda + k] or,
// ATrans, a[k*lda + m]; B k-major b[n*ldb + k] or, BTrans, b[k*ldb + n].
// bf16 tiles: mma.sync m16n8k16 with fp32 accumulators (warp_mma.cuh's load_a, load_b2 and mma; the
// transposed layouts load with ldmatrix .trans); each warp owns 16 x 32 output tiles, so m % 16 == 0,
// n % 32 == 0, k % 16 == 0, and rows must be 16-byte aligned (ld % 8 == 0; ld = width + 8 keeps the
// eight rows of an ldmatrix on distinct banks). fp32 tiles take the scalar path: one output element
// per thread in turn. Tiles come in by stage_tile (warp_mma.cuh), then tiles_ready().
#pragma once
#include <cstdint>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/warp_mma.cuh"

namespace hytra::cuda {

template <class E, bool ATrans, bool BTrans>
struct Prod {
  using Elem = E;
  const E* a;
  int lda;
  const E* b;
  int ldb;
  int k;
  __device__ float dot(int row, int col) const {  // the scalar path: sum over k in order
    float s = 0.0f;
    for (int i = 0; i < k; ++i)
      s += to_float(ATrans ? a[i * lda + row] : a[row * lda + i]) *
           to_float(BTrans ? b[i * ldb + col] : b[col * ldb + i]);
    return s;
  }
};

template <bool ATrans, bool BTrans, class E>
__device__ __forceinline__ Prod<E, ATrans, BTrans> mm(const E* a, int lda, const E* b, int ldb, int k) {
  return {a, lda, b, ldb, k};
}

// acc[j] (the n8 tile n0 + 8j of rows m0..m0+15) += A B over p.k, in k steps of 16: the A fragment,
// the B fragments of both n16 halves, then the four products in order.
template <bool AT, bool BT>
__device__ __forceinline__ void mma_tile(Acc (&acc)[4], const Prod<bf16, AT, BT>& p, int m0, int n0) {
  for (int k0 = 0; k0 < p.k; k0 += 16) {
    FragA<bf16> fa;
    FragB<bf16> fb[2][2];
    load_a<!AT>(fa, p.a, p.lda, m0, k0);
#pragma unroll
    for (int h = 0; h < 2; ++h) load_b2<!BT>(fb[h], p.b, p.ldb, k0, n0 + 16 * h);
#pragma unroll
    for (int j = 0; j < 4; ++j) mma(acc[j], fa, fb[j / 2][j % 2]);
  }
}

// Accumulator element e of n8 tile j: row m0 + g + 8 (e / 2), column n0 + 8 j + 2 t + e % 2
// (g = lane / 4, t = lane % 4).
template <class Epi, class... P>
__device__ __forceinline__ void mma_gemm(int first_warp, int m, int n, Epi& epi, const P&... p) {
  const int nwarps = blockDim.x / 32, warp = (threadIdx.x / 32 + nwarps - first_warp % nwarps) % nwarps;
  const int lane = threadIdx.x % 32, tn = n / 32, tiles = (m / 16) * tn;
  for (int tile = warp; tile < tiles; tile += nwarps) {
    const int m0 = tile / tn * 16 + lane / 4, n0 = tile % tn * 32 + 2 * (lane % 4);
    Acc acc[4] = {};
    (mma_tile(acc, p, tile / tn * 16, tile % tn * 32), ...);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      epi(m0, n0 + 8 * j, acc[j].v[0], acc[j].v[1]);
      epi(m0 + 8, n0 + 8 * j, acc[j].v[2], acc[j].v[3]);
    }
  }
}

template <class Epi, class P0, class... P>
__device__ __forceinline__ void block_gemm_from(int first_warp, int m, int n, Epi&& epi, const P0& p0, const P&... p) {
  if constexpr (std::is_same_v<typename P0::Elem, bf16>) {
    mma_gemm(first_warp, m, n, epi, p0, p...);
  } else {
    const int nt = blockDim.x, half = n / 2;
    for (int idx = (threadIdx.x + nt - (32 * first_warp) % nt) % nt; idx < m * half; idx += nt) {
      const int row = idx / half, col = 2 * (idx % half);
      float s0 = p0.dot(row, col), s1 = p0.dot(row, col + 1);
      ((s0 += p.dot(row, col)), ...);
      ((s1 += p.dot(row, col + 1)), ...);
      epi(row, col, s0, s1);
    }
  }
}

template <class Epi, class... P>
__device__ __forceinline__ void block_gemm(int m, int n, Epi&& epi, const P&... p) {
  block_gemm_from(0, m, n, epi, p...);
}

// Waits for this thread's copies, then for the block: every tile staged so far is visible.
__device__ __forceinline__ void tiles_ready() {
  cp_async_wait_all();
  __syncthreads();
}
// As tiles_ready, except that the group committed last may still be in flight (double buffering).
__device__ __forceinline__ void tiles_ready_but_latest() {
  cp_async_wait<1>();
  __syncthreads();
}

// Shared-memory carving: take<T>(n) returns the next 16-byte-aligned array of n T. Built on the
// host with base 0, it sizes the block's dynamic shared memory; on the device it lays it out.
struct SmemCarver {
  uintptr_t base;
  size_t off = 0;
  template <class T>
  __host__ __device__ T* take(size_t n) {
    off = (off + 15) / 16 * 16;
    T* p = reinterpret_cast<T*>(base + off);
    off += n * sizeof(T);
    return p;
  }
};

}  // namespace hytra::cuda
