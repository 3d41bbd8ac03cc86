// Block-level matrix products on shared-memory tiles, for the chunked scan kernels (gdn_*.cu).
// block_gemm(m, n, epi, prods...) computes C (m x n) = sum over prods of A (m x k) B (k x n) and hands
// each pair of neighbours to epi(row, col, C[row][col], C[row][col + 1]) (col even) exactly once, from
// one thread. Which thread gets a pair depends only on (m, n, first_warp) and the block size, and the
// sum runs in a fixed order: results are deterministic. block_gemm_from(first_warp, ...) starts the
// tile assignment at that warp, so two products issued back to back can run on different warps. It
// does not synchronise; callers put __syncthreads() between dependent steps.
// Layouts (Prod's flags): A m-major a[m*lda + k] or, ATrans, k-major a[k*lda + m]; B n-major
// b[n*ldb + k] or, BKMajor, k-major b[k*ldb + n].
// bf16 tiles: mma.sync m16n8k16 with fp32 accumulators, fragments loaded by ldmatrix (.trans for
// the transposed layouts); each warp owns 16 x 32 output tiles, so m % 16 == 0, n % 32 == 0,
// k % 16 == 0, and rows must be 16-byte aligned (ld % 8 == 0; ld = width + 8 keeps the eight rows of an
// ldmatrix on distinct banks). fp32 tiles take the scalar path: one output element per thread in turn.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace hytra::cuda {

using bf16 = __nv_bfloat16;

template <class E>
__device__ __forceinline__ float to_f(E x) {
  if constexpr (std::is_same_v<E, float>)
    return x;
  else
    return __bfloat162float(x);
}
template <class E>
__device__ __forceinline__ E from_f(float x) {
  if constexpr (std::is_same_v<E, float>)
    return x;
  else
    return __float2bfloat16_rn(x);
}

template <class E, bool ATrans, bool BKMajor>
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
      s += to_f(ATrans ? a[i * lda + row] : a[row * lda + i]) * to_f(BKMajor ? b[i * ldb + col] : b[col * ldb + i]);
    return s;
  }
};

template <bool ATrans, bool BKMajor, class E>
__device__ __forceinline__ Prod<E, ATrans, BKMajor> mm(const E* a, int lda, const E* b, int ldb, int k) {
  return {a, lda, b, ldb, k};
}

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc[j] (the n8 tile n0 + 8j of rows m0..m0+15) += A B over p.k. Lane l addresses row l % 8 of
// 8x8 matrix l / 8; the matrices are ordered as the fragment registers: A (m0-7,k0-7) (m8-15,k0-7)
// (m0-7,k8-15) (m8-15,k8-15); B per pair of n8 tiles (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15).
template <bool AT, bool BK>
__device__ __forceinline__ void mma_tile(float (&acc)[4][4], const Prod<bf16, AT, BK>& p, int m0, int n0) {
  const int lane = threadIdx.x % 32, r = lane % 8, q = lane / 8;
  for (int k0 = 0; k0 < p.k; k0 += 16) {
    unsigned a[4], b[2][4];
    if constexpr (AT)
      ldsm_x4_t(a, p.a + (k0 + r + 8 * (q / 2)) * p.lda + m0 + 8 * (q % 2));
    else
      ldsm_x4(a, p.a + (m0 + r + 8 * (q % 2)) * p.lda + k0 + 8 * (q / 2));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int nb = n0 + 16 * h;
      if constexpr (BK)
        ldsm_x4_t(b[h], p.b + (k0 + r + 8 * (q % 2)) * p.ldb + nb + 8 * (q / 2));
      else
        ldsm_x4(b[h], p.b + (nb + r + 8 * (q / 2)) * p.ldb + k0 + 8 * (q % 2));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) mma_16816(acc[j], a, b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]);
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
    float acc[4][4] = {};
    (mma_tile(acc, p, tile / tn * 16, tile % tn * 32), ...);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      epi(m0, n0 + 8 * j, acc[j][0], acc[j][1]);
      epi(m0 + 8, n0 + 8 * j, acc[j][2], acc[j][3]);
    }
  }
}
#endif

template <class Epi, class P0, class... P>
__device__ __forceinline__ void block_gemm_from(int first_warp, int m, int n, Epi&& epi, const P0& p0, const P&... p) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<typename P0::Elem, bf16>)
    mma_gemm(first_warp, m, n, epi, p0, p...);
  else
#endif
  {
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

// Two neighbours p[0], p[1] (p aligned to their pair) as one store.
__device__ __forceinline__ void put2(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void put2(bf16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
// Columns col, col + 1 of a row of n elements (either may lie past the end; any alignment).
template <class T>
__device__ __forceinline__ void put2_edge(T* row, int col, int n, float a, float b) {
  if (col + 1 < n && (reinterpret_cast<uintptr_t>(row + col) & (2 * sizeof(T) - 1)) == 0) {
    put2(row + col, a, b);
  } else {
    if (col < n) row[col] = from_f<T>(a);
    if (col + 1 < n) row[col + 1] = from_f<T>(b);
  }
}
// Two neighbours as floats.
__device__ __forceinline__ float2 get2(const float* p) { return *reinterpret_cast<const float2*>(p); }

__device__ __forceinline__ bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// 16 bytes from global src into shared dst, or zeros when !valid: an asynchronous copy (cp.async,
// zero-filled) on the device, completed by tiles_ready().
__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
#else
  *static_cast<uint4*>(dst) = valid ? *static_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
#endif
}

// Waits for this thread's copies, then for the block: every tile loaded so far is visible.
__device__ __forceinline__ void tiles_ready() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
  __syncthreads();
}

// Closes the group of copies issued since the last call (cp.async.commit_group).
__device__ __forceinline__ void tiles_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// As tiles_ready, except that the group committed last may still be in flight (double buffering).
__device__ __forceinline__ void tiles_ready_but_latest() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
  __syncthreads();
}

// Tile rows [0, rows) x columns [0, cols) into dst (row stride ldd) from src (row stride lds); elements
// outside [0, vr) x [0, vc) are zero. Asynchronous 16-byte copies when the sizes and addresses allow
// (else plain loads); the tile is ready after tiles_ready().
template <class E>
__device__ void load_tile(E* dst, int ldd, const E* src, int64_t lds, int rows, int cols, int vr, int vc) {
  constexpr int V = 16 / int(sizeof(E));
  if (cols % V == 0 && vc % V == 0 && lds % V == 0 && ldd % V == 0 && is_aligned16(src) && is_aligned16(dst)) {
    // Vector (r, c) of this thread, advanced by blockDim.x vectors a step without dividing.
    const int cv = cols / V, dr = int(blockDim.x) / cv, dc = int(blockDim.x) % cv;
    for (int r = threadIdx.x / cv, c = threadIdx.x % cv; r < rows;) {
      const bool in = r < vr && c * V < vc;
      copy16(dst + r * ldd + c * V, in ? src + r * lds + c * V : src, in);
      r += dr;
      c += dc;
      if (c >= cv) {
        c -= cv;
        ++r;
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {
      const int r = idx / cols, c = idx % cols;
      dst[r * ldd + c] = r < vr && c < vc ? src[r * lds + c] : from_f<E>(0.0f);
    }
  }
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
