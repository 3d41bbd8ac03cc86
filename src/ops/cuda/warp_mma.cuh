// Warp-level 16x8x16 matrix products (the building blocks of the SSD kernels and of block_mma.cuh):
// fragments, their loads from shared memory, tiles copied into shared memory, and the product
// itself. T = bf16 runs mma.sync on the tensor cores (fp32 accumulation); T = float runs the same
// fragment layout as exact fp32 FMAs whose operands travel by shuffles (a slow path for fp32 runs
// and tests), so one kernel source serves both dtypes.
// Fragment layout (PTX mma.m16n8k16; g = lane / 4, t = lane % 4), element e of
//   A (16x16, rows m, cols k): row g + 8 ((e / 2) % 2), col 2t + e % 2 + 8 (e / 4)
//   B (16x8, rows k, cols n):  row 2t + e % 2 + 8 (e / 2), col g
//   C (16x8 fp32, "Acc"):      row g + 8 (e / 2),       col 2t + e % 2
// Two adjacent 8-column accumulators are, element for element, one A fragment (acc_to_a). A shared
// operand is "k-major" when its k index is contiguous (A stored [m][k], B stored [n][k]); otherwise
// ("transposed") it is stored [k][m] / [k][n] and bf16 loads use ldmatrix .trans. Shared tiles have a
// row pitch of width + kPad<T> elements (16 bytes more than the row: conflict-free ldmatrix, aligned
// rows).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace hytra::cuda {

using bf16 = __nv_bfloat16;

template <class T>
inline constexpr int kPad = int(16 / sizeof(T));

template <class T>
struct FragA;
template <>
struct FragA<bf16> {
  uint32_t r[4];
};
template <>
struct FragA<float> {
  float v[8];
};
template <class T>
struct FragB;
template <>
struct FragB<bf16> {
  uint32_t r[2];
};
template <>
struct FragB<float> {
  float v[4];
};
struct Acc {
  float v[4];
};

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) & 31; }
// Row / column of element e of an accumulator or an A fragment, from the tile's corner.
__device__ __forceinline__ int acc_row(int e) { return (lane_id() >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int acc_col(int e) { return 2 * (lane_id() & 3) + (e & 1); }
__device__ __forceinline__ int a_row(int e) { return (lane_id() >> 2) + 8 * ((e >> 1) & 1); }
__device__ __forceinline__ int a_col(int e) { return 2 * (lane_id() & 3) + (e & 1) + 8 * (e >> 2); }

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return __float2bfloat16_rn(v);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Elements p[0], p[1] as fp32 (p 2-element aligned; global or shared memory), and the reverse.
__device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load2(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(bf16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

// An A fragment from / to its 8 values in element order (bf16 rounds to nearest even).
__device__ __forceinline__ void set_a(FragA<float>& f, const float (&v)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) f.v[e] = v[e];
}
__device__ __forceinline__ void set_a(FragA<bf16>& f, const float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) f.r[i] = pack_bf16(v[2 * i], v[2 * i + 1]);
}
__device__ __forceinline__ void get_a(const FragA<float>& f, float (&v)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = f.v[e];
}
__device__ __forceinline__ void get_a(const FragA<bf16>& f, float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(f.r[i] << 16);
    v[2 * i + 1] = __uint_as_float(f.r[i] & 0xffff0000u);
  }
}
// Accumulators c0 (cols 0-7) and c1 (cols 8-15) as the A fragment of those 16 columns.
template <class T>
__device__ __forceinline__ void acc_to_a(FragA<T>& f, const Acc& c0, const Acc& c1) {
  const float v[8] = {c0.v[0], c0.v[1], c0.v[2], c0.v[3], c1.v[0], c1.v[1], c1.v[2], c1.v[3]};
  set_a(f, v);
}
// Multiplies the fragment's rows by f_lo (rows 0-7) and f_hi (rows 8-15).
template <class T>
__device__ __forceinline__ void scale_a_rows(FragA<T>& f, float f_lo, float f_hi) {
  float v[8];
  get_a(f, v);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] *= ((e >> 1) & 1) ? f_hi : f_lo;
  set_a(f, v);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A fragment (rows m0..m0+15, cols k0..k0+15) from a shared tile of row pitch ld.
template <bool kKMajor>
__device__ __forceinline__ void load_a(FragA<bf16>& f, const bf16* s, int ld, int m0, int k0) {
  const int l = lane_id();
  if constexpr (kKMajor) {
    const uint32_t p = smem_addr(s + (m0 + (l & 15)) * ld + k0 + (l >> 4) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3])
                 : "r"(p));
  } else {
    const uint32_t p = smem_addr(s + (k0 + (l & 7) + (l >> 4) * 8) * ld + m0 + ((l >> 3) & 1) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3])
                 : "r"(p));
  }
}
template <bool kKMajor>
__device__ __forceinline__ void load_a(FragA<float>& f, const float* s, int ld, int m0, int k0) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int m = m0 + a_row(e), k = k0 + a_col(e);
    f.v[e] = kKMajor ? s[m * ld + k] : s[k * ld + m];
  }
}

// B fragments of two adjacent 8-column tiles (rows k0..k0+15; cols n0.. in f[0], n0+8.. in f[1]).
template <bool kKMajor>
__device__ __forceinline__ void load_b2(FragB<bf16> (&f)[2], const bf16* s, int ld, int k0, int n0) {
  const int l = lane_id();
  if constexpr (kKMajor) {
    const uint32_t p = smem_addr(s + (n0 + (l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(f[0].r[0]), "=r"(f[0].r[1]), "=r"(f[1].r[0]), "=r"(f[1].r[1])
                 : "r"(p));
  } else {
    const uint32_t p = smem_addr(s + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(f[0].r[0]), "=r"(f[0].r[1]), "=r"(f[1].r[0]), "=r"(f[1].r[1])
                 : "r"(p));
  }
}
template <bool kKMajor>
__device__ __forceinline__ void load_b2(FragB<float> (&f)[2], const float* s, int ld, int k0, int n0) {
  const int l = lane_id();
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int k = k0 + 2 * (l & 3) + (e & 1) + 8 * (e >> 1), n = n0 + 8 * h + (l >> 2);
      f[h].v[e] = kKMajor ? s[n * ld + k] : s[k * ld + n];
    }
}

// c += a b (16x8x16).
__device__ __forceinline__ void mma(Acc& c, const FragA<bf16>& a, const FragB<bf16>& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}
// fp32: lane (g, t) gathers, for each quad column s, A rows g and g+8 at k = 2s, 2s+1, 2s+8, 2s+9
// (lane 4g + s) and B columns 2t, 2t+1 at those k (lanes 8t + s, 8t + 4 + s).
__device__ __forceinline__ void mma(Acc& c, const FragA<float>& a, const FragB<float>& b) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int la = 4 * g + s, lb0 = 8 * t + s, lb1 = 8 * t + 4 + s;
    const int lo[4] = {0, 1, 4, 5}, hi[4] = {2, 3, 6, 7};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float a_lo = __shfl_sync(0xffffffffu, a.v[lo[i]], la);
      const float a_hi = __shfl_sync(0xffffffffu, a.v[hi[i]], la);
      const float b0 = __shfl_sync(0xffffffffu, b.v[i], lb0);
      const float b1 = __shfl_sync(0xffffffffu, b.v[i], lb1);
      c.v[0] = fmaf(a_lo, b0, c.v[0]);
      c.v[1] = fmaf(a_lo, b1, c.v[1]);
      c.v[2] = fmaf(a_hi, b0, c.v[2]);
      c.v[3] = fmaf(a_hi, b1, c.v[3]);
    }
  }
}

// acc (16 rows x 64 columns) += a (16 x 16) times rows k0..k0+15, columns n0..n0+63 of the shared
// tile s: four pairs of 8-column products, in column order.
template <bool kKMajor, class T>
__device__ __forceinline__ void mma_x64(Acc (&acc)[8], const FragA<T>& a, const T* s, int ld, int k0, int n0 = 0) {
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    FragB<T> fb[2];
    load_b2<kKMajor>(fb, s, ld, k0, n0 + 16 * p);
    mma(acc[2 * p], a, fb[0]);
    mma(acc[2 * p + 1], a, fb[1]);
  }
}

// ---- tiles into shared memory ----------------------------------------------------------------------
// 16 bytes from global src into shared dst, the first src_bytes of them read and the rest zero-filled
// (cp.async). Commit groups, wait, then synchronise the block before reading dst; the "memory"
// clobbers keep the compiler from moving shared-memory accesses across the waits.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending committed groups of this thread are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// Waits for every copy of this thread, committed or not.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// dst[r][c] (row pitch ld) = src[r * src_ld + c] for r < rows_valid and c < cols_valid, else 0, for
// r < rows and c < cols. All threads of the block take part. When the rows start 16-byte aligned on
// both sides (and cols spans whole 16 bytes), rows go by cp.async (zero-filling past cols_valid; the
// rows past rows_valid are stored as zeros at once): the caller commits, waits and synchronises;
// otherwise elements are copied one by one at once. Either way the tile holds the same values.
template <class T>
__device__ void stage_tile(T* dst, int ld, const T* src, int64_t src_ld, int rows, int cols, int rows_valid,
                           int cols_valid) {
  constexpr int V = kPad<T>;  // elements per 16 bytes
  const uintptr_t bits = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                         uintptr_t(src_ld * int64_t(sizeof(T))) | uintptr_t(ld * int(sizeof(T))) |
                         uintptr_t(cols * int(sizeof(T)));
  if ((bits & 15) == 0 && cols > 0) {
    // Vector (r, c) of this thread, advanced by blockDim.x vectors a step without dividing, with its
    // source and destination; the first (r, c) by shifts where per_row is a power of two (the usual case).
    const int per_row = cols / V, sh = __ffs(per_row) - 1;
    const bool pow2 = per_row == 1 << sh;
    auto split = [&](int i, int& r, int& c) {
      r = pow2 ? i >> sh : i / per_row;
      c = i - r * per_row;
    };
    int dr, dc, r, c;
    split(int(blockDim.x), dr, dc);
    split(int(threadIdx.x), r, c);
    const int64_t s_step = dr * src_ld + dc * V, s_wrap = src_ld - per_row * V;
    const int d_step = dr * ld + dc * V, d_wrap = ld - per_row * V;
    const T* s = src + r * src_ld + c * V;
    T* p = dst + r * ld + c * V;
    while (r < rows) {
      // The first n elements copied, the rest of the 16 bytes zero-filled by cp.async (all of them
      // when n = 0: src itself is then a valid address that is not read).
      const int n = r < rows_valid ? max(0, min(V, cols_valid - c * V)) : 0;
      cp_async16(p, n > 0 ? s : src, n * int(sizeof(T)));
      r += dr;
      c += dc;
      s += s_step;
      p += d_step;
      if (c >= per_row) {
        c -= per_row;
        ++r;
        s += s_wrap;
        p += d_wrap;
      }
    }
  } else {
    for (int i = int(threadIdx.x); i < rows * cols; i += int(blockDim.x)) {
      const int r = i / cols, c = i % cols;
      dst[r * ld + c] = r < rows_valid && c < cols_valid ? src[r * src_ld + c] : from_float<T>(0.0f);
    }
  }
}

// Stores accumulator element pair (v0, v1) at p[0], p[1]: the first `valid` of them (0..2), as one
// 2-element store when `paired` (p then 2-element aligned).
template <class T>
__device__ __forceinline__ void store_pair(T* p, float v0, float v1, int valid, bool paired) {
  if (valid >= 2 && paired) {
    store2(p, v0, v1);
  } else {
    if (valid >= 1) p[0] = from_float<T>(v0);
    if (valid >= 2) p[1] = from_float<T>(v1);
  }
}
// Columns col, col + 1 of a row of n elements (either may lie past the end; any alignment).
template <class T>
__device__ __forceinline__ void store_pair_in_row(T* row, int col, int n, float v0, float v1) {
  store_pair(row + col, v0, v1, n - col, (reinterpret_cast<uintptr_t>(row + col) & (2 * sizeof(T) - 1)) == 0);
}

}  // namespace hytra::cuda
