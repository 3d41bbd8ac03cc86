// The SSD backward's group kernel (ssd_bwd.cu has the formulas): dC and dB for one (b, chunk, group g)
// and 64 columns of N, each summing the group's heads in order in fp32 accumulators (no atomics); the
// blocks of the group's 64-column tiles take turns, head by head, to sum the diagonal block's share of
// da, and each block gives its columns' share of o_i (ssd_bwd.cu), from the S_{c-1} product dC forms
// anyway. 2Q threads; warp w owns the chunk's rows 16w.. (i for dC, j for dB). Per head, x, dy and
// the state tiles are staged in shared memory once for both, and dy.x^T is formed 64 columns at a time
// in registers, masked and decayed there, and used as the A operand of the product with B (dC) or C
// (dB). Where the fused kernel would hold fewer blocks on an SM (its shared memory), dC and dB run as
// two kernels.
#include <algorithm>

#include "ops/cuda/ssd.cuh"

namespace hytra::cuda::ssd {
namespace {

// Shared layout: the group's 64-column Bm tile (dC) and Cm tile (dB), the head's x and dy (all of P),
// its state tiles (rows 0..Pk, the 64 columns: S_{c-1} for dC, dS_c for dB), dt and cum; dB adds
// per-warp da column sums, the row sums and block_prefix's 32 floats. Layout and size (bc_smem) hold
// only the parts of the kernel's roles.
template <class T, bool kDC, bool kDB>
struct BcSmem {
  static constexpr int ld = kTile + kPad<T>;
  int ldp;
  T *mb, *mc, *x, *dy, *sp, *sn;
  float *dt, *cum, *cols, *rsum, *red;
  __device__ BcSmem(unsigned char* smem, const Dims& d) : ldp(d.Pk + kPad<T>) {
    mb = reinterpret_cast<T*>(smem);                            // (Q, ld) Bm
    mc = mb + (kDC ? d.Q * ld : 0);                             // (Q, ld) Cm
    x = mc + (kDB ? d.Q * ld : 0);                              // (Q, ldp)
    dy = x + d.Q * ldp;                                         // (Q, ldp)
    sp = dy + d.Q * ldp;                                        // (Pk, ld) S_{c-1}
    sn = sp + (kDC ? d.Pk * ld : 0);                            // (Pk, ld) dS_c
    dt = reinterpret_cast<float*>(sn + (kDB ? d.Pk * ld : 0));  // (Q)
    cum = dt + d.Q;                                             // (Q)
    cols = cum + d.Q;                                           // (Q/16, Q)
    rsum = cols + (kDB ? d.Q / 16 * d.Q : 0);                   // (Q)
    red = rsum + (kDB ? d.Q : 0);                               // (32) block_prefix
  }
  // The head's scalars, x, dy and the state tiles its roles read; the caller commits and waits.
  __device__ void stage_head(const Args<T>& a, int64_t b, int64_t h, int64_t c, int n0) const {
    const Dims& d = a.d;
    const int64_t t0 = c * d.Q;
    const int rows = int(std::min<int64_t>(d.Q, d.T - t0));
    stage_scalars(dt, cum, a, b, h, c);
    stage_tile(x, ldp, a.x + d.xrow(b, t0, h), d.H * d.P, d.Q, d.Pk, rows, int(d.P));
    stage_tile(dy, ldp, a.dy + d.xrow(b, t0, h), d.H * d.P, d.Q, d.Pk, rows, int(d.P));
    const int64_t st = d.state(b, h, c) + n0;
    if (kDC && c > 0) stage_tile(sp, ld, a.states + st, d.SN(), d.Pk, kTile, d.Pk, kTile);
    if (kDB && c + 1 < d.nC) stage_tile(sn, ld, a.dstates + st, d.SN(), d.Pk, kTile, d.Pk, kTile);
  }
};

// acc (16 rows from r0, 64 columns) += rows r0.. of A (k-major (Q, Pk) tile `sa`, pitch ldp) times
// the (Pk, 64) state tile `st`, the A rows scaled by f_lo / f_hi.
template <class T>
__device__ __forceinline__ void rows_times_state(Acc (&acc)[8], const T* sa, int ldp, const T* st, int pk, int r0,
                                                 float f_lo, float f_hi) {
  constexpr int ld = kTile + kPad<T>;
  for (int kk = 0; kk < pk / 16; ++kk) {
    FragA<T> fa;
    load_a<true>(fa, sa, ldp, r0, 16 * kk);
    scale_a_rows(fa, f_lo, f_hi);
    mma_x64<false>(acc, fa, st, ld, 16 * kk);
  }
}

// w (16 rows from r0, columns c0..c0+63) = rows of `sa` . rows of `sb` over p (both (Q, Pk) k-major,
// pitch ldp), the 16-column pairs for which `need(col)` holds.
template <class T, class Need>
__device__ __forceinline__ void rows_dot_rows(Acc (&w)[8], const T* sa, const T* sb, int ldp, int pk, int r0, int c0,
                                              Need need) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) w[nt] = Acc{};
  for (int kk = 0; kk < pk / 16; ++kk) {
    FragA<T> fa;
    load_a<true>(fa, sa, ldp, r0, 16 * kk);
#pragma unroll
    for (int cp = 0; cp < 4; ++cp) {
      if (!need(c0 + 16 * cp)) continue;
      FragB<T> fb[2];
      load_b2<true>(fb, sb, ldp, 16 * kk, c0 + 16 * cp);
      mma(w[2 * cp], fa, fb[0]);
      mma(w[2 * cp + 1], fa, fb[1]);
    }
  }
}

// acc += w (as A: 16 rows, 64 steps from c0) times the (steps, 64) tile m, the 16-step pairs that `need`.
template <class T, class Need>
__device__ __forceinline__ void block_times_m(Acc (&acc)[8], const Acc (&w)[8], const T* m, int c0, Need need) {
  constexpr int ld = kTile + kPad<T>;
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    if (!need(c0 + 16 * kt)) continue;
    FragA<T> fa;
    acc_to_a(fa, w[2 * kt], w[2 * kt + 1]);
    mma_x64<false>(acc, fa, m, ld, c0 + 16 * kt);
  }
}

// out[b, t0 + r0.., g, n0..] = acc (rows before T, columns before N).
template <class T>
__device__ __forceinline__ void store_rows(T* out, const Acc (&acc)[8], const Dims& d, int64_t b, int64_t g, int64_t t0,
                                           int r0, int n0) {
  const int rows = int(std::min<int64_t>(d.Q, d.T - t0));
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = r0 + acc_row(2 * hf);
    if (i >= rows) continue;
    T* o = out + d.brow(b, t0 + i, g) + n0;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int n = 8 * nt + acc_col(0);
      store_pair(o + n, acc[nt].v[2 * hf], acc[nt].v[2 * hf + 1], int(std::min<int64_t>(2, d.N - n0 - n)),
                 d.N % 2 == 0);
    }
  }
}

// dC rows i, the staged head's share: exp(cum_i) dy_i S_{c-1} + sum_{j<=i} exp(cum_i - cum_j) dt_j (dy_i.x_j) B_j;
// and o_out[i] = the tile's share of o_i = sum_n (exp(cum_i) dy_i S_{c-1})_n C_in (c_pair(i, n): C_in, C_i,n+1).
template <class S, class CPair>
__device__ __forceinline__ void dc_head(Acc (&acc)[8], const S& s, const Dims& d, int64_t c, int r0, float* o_out,
                                        CPair c_pair) {
  float o[2] = {0.0f, 0.0f};
  if (c > 0) {
    Acc st[8] = {};
    rows_times_state(st, s.dy, s.ldp, s.sp, d.Pk, r0, exp2_ftz(s.cum[r0 + a_row(0)]), exp2_ftz(s.cum[r0 + a_row(2)]));
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float2 cv = c_pair(r0 + acc_row(2 * hf), 8 * nt + acc_col(0));
        o[hf] += st[nt].v[2 * hf] * cv.x + st[nt].v[2 * hf + 1] * cv.y;
        acc[nt].v[2 * hf] += st[nt].v[2 * hf];
        acc[nt].v[2 * hf + 1] += st[nt].v[2 * hf + 1];
      }
  }
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {  // over the 4 lanes of a row
    o[hf] += __shfl_xor_sync(0xffffffffu, o[hf], 1);
    o[hf] += __shfl_xor_sync(0xffffffffu, o[hf], 2);
    if ((lane_id() & 3) == 0) o_out[r0 + acc_row(2 * hf)] = o[hf];
  }
  auto below = [&](int col) { return col <= r0 + 15; };  // 16 columns holding some j <= i
  const int i[2] = {r0 + acc_row(0), r0 + acc_row(2)};
  const float cum_i[2] = {s.cum[i[0]], s.cum[i[1]]};
  for (int j0 = 0; j0 <= r0 + 15; j0 += kTile) {
    Acc w[8];
    rows_dot_rows(w, s.dy, s.x, s.ldp, d.Pk, r0, j0, below);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = j0 + 8 * nt + acc_col(0);
      const float2 cum_j = load2(s.cum + j), dt_j = load2(s.dt + j);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float& w0 = w[nt].v[2 * hf];
        float& w1 = w[nt].v[2 * hf + 1];
        const float v0 = w0 * exp2_ftz(cum_i[hf] - cum_j.x) * dt_j.x, v1 = w1 * exp2_ftz(cum_i[hf] - cum_j.y) * dt_j.y;
        w0 = j <= i[hf] ? v0 : 0.0f;
        w1 = j + 1 <= i[hf] ? v1 : 0.0f;
      }
    }
    block_times_m(acc, w, s.mb, j0, below);
  }
}

// One halving exchange of a sum over lanes: lanes with bit 2 kHalf set keep values kHalf.. of v[0, 2 kHalf),
// the others values 0.., each plus its partner's copy; both put them in v[0, kHalf) and add to base
// the first index kept.
template <int kHalf>
__device__ __forceinline__ void halve(float (&v)[16], int& base) {
  const bool up = (lane_id() & 2 * kHalf) != 0;
#pragma unroll
  for (int k = 0; k < kHalf; ++k) {
    const float keep = up ? v[kHalf + k] : v[k], send = up ? v[k] : v[kHalf + k];
    v[k] = keep + __shfl_xor_sync(0xffffffffu, send, 2 * kHalf);
  }
  base += up ? kHalf : 0;
}

// Diagonal-block share of da from one 64-column block (columns i from i0) of Z^T_ji = w_ji (C.B)^T_ji:
// with a_j = sum_{i>j} Z^T_ji and b_i = sum_{j<i} Z^T_ji, sum_{j<k<=i} Z_ij = sum_{m<k} (a_m - b_m)
// (the kernel's combine), a chunk-local sum, so no cancellation grows with T. The lanes' shares of a
// gather in `row`; the warp's 16 rows' shares of b go to cols[warp][i], summed over the 8 lanes of a
// column by halving exchanges (14 shuffles for the 16 values a lane holds, not 3 per value).
template <class T>
__device__ __forceinline__ void da_block(const Acc (&w)[8], const T* cbt, int Q, int r0, int i0, float (&row)[2],
                                         float* cols) {
  const int lane = lane_id();
  float v[16];  // column sums of the lane's rows: column i0 + 8 (k / 2) + 2t + k % 2 in v[k]
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int i = i0 + 8 * nt + acc_col(0);
    v[2 * nt] = v[2 * nt + 1] = 0.0f;
    if (i0 + 8 * nt + 7 <= r0) continue;  // no i > j
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int j = r0 + acc_row(2 * hf);
      const float2 cv = load2(cbt + int64_t(j) * Q + i);
      const float z0 = i > j ? w[nt].v[2 * hf] * cv.x : 0.0f, z1 = i + 1 > j ? w[nt].v[2 * hf + 1] * cv.y : 0.0f;
      row[hf] += z0 + z1;
      v[2 * nt] += z0;
      v[2 * nt + 1] += z1;
    }
  }
  int base = 0;  // the first of the values a lane keeps
  halve<8>(v, base);
  halve<4>(v, base);
  halve<2>(v, base);
  store2(cols + (r0 / 16) * Q + i0 + 4 * base + 2 * (lane & 3), v[0], v[1]);
}

// dB rows j, the staged head's share: dt_j exp(cumL - cum_j) x_j dS_c (not in the last chunk: the state
// leaving it feeds nothing) + sum_{i>=j} exp(cum_i - cum_j) dt_j (x_j.dy_i) C_i; with `with_da`, the
// diagonal block's da sums (da_block; Z_ij = w_ji (C.B)^T_ji, cbt the B_j.C_i block): a_j in s.rsum,
// the warp's b_i in s.cols.
template <class T, class S>
__device__ __forceinline__ void db_head(Acc (&acc)[8], const S& s, const Dims& d, bool last, const T* cbt, bool with_da,
                                        int r0) {
  if (!last) {
    const float cumL = s.cum[d.Q - 1];
    const int j_lo = r0 + a_row(0), j_hi = r0 + a_row(2);
    rows_times_state(acc, s.x, s.ldp, s.sn, d.Pk, r0, s.dt[j_lo] * exp2_ftz(cumL - s.cum[j_lo]),
                     s.dt[j_hi] * exp2_ftz(cumL - s.cum[j_hi]));
  }
  auto above = [&](int col) { return col + 15 >= r0; };  // 16 columns holding some i >= j
  float row[2] = {0.0f, 0.0f};
  const int j[2] = {r0 + acc_row(0), r0 + acc_row(2)};
  const float cum_j[2] = {s.cum[j[0]], s.cum[j[1]]}, dt_j[2] = {s.dt[j[0]], s.dt[j[1]]};
  for (int i0 = d.Q - kTile; i0 + kTile - 1 >= r0; i0 -= kTile) {
    Acc w[8];
    rows_dot_rows(w, s.x, s.dy, s.ldp, d.Pk, r0, i0, above);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int i = i0 + 8 * nt + acc_col(0);
      const float2 cum_i = load2(s.cum + i);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float& w0 = w[nt].v[2 * hf];
        float& w1 = w[nt].v[2 * hf + 1];
        const float v0 = w0 * exp2_ftz(cum_i.x - cum_j[hf]) * dt_j[hf],
                    v1 = w1 * exp2_ftz(cum_i.y - cum_j[hf]) * dt_j[hf];
        w0 = i >= j[hf] ? v0 : 0.0f;
        w1 = i + 1 >= j[hf] ? v1 : 0.0f;
      }
    }
    if (with_da) da_block(w, cbt, d.Q, r0, i0, row, s.cols);
    block_times_m(acc, w, s.mc, i0, above);
  }
  if (!with_da) return;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {  // over the 4 lanes of a row
    row[hf] += __shfl_xor_sync(0xffffffffu, row[hf], 1);
    row[hf] += __shfl_xor_sync(0xffffffffu, row[hf], 2);
    if ((lane_id() & 3) == 0) s.rsum[r0 + acc_row(2 * hf)] = row[hf];
  }
}

// dC (kDC) and dB (kDB) rows of one (b, chunk, group g), 64 columns from n0, summing the group's heads
// in order; with both, each head's x and dy are staged once for the two. With kDB, the block of n-tile
// (h - g hpg) % nt writes da_diag[b,h,t] = sum_{j<k<=i} Z_ij (k = t's step); kDC ones write their
// tile's share of o (o_part).
template <class T, bool kDC, bool kDB>
__global__ void __launch_bounds__(2 * kMaxQ) ssd_bc_kernel(Args<T> a, T* dC, T* dB, float* da_diag, float* o_part) {
  const Dims& d = a.d;
  const int n0 = int(blockIdx.x) * kTile, warps = d.Q / 16;
  const int64_t g = blockIdx.y, b = blockIdx.z / d.nC, c = blockIdx.z % d.nC, t0 = c * d.Q;
  const int rows = int(std::min<int64_t>(d.Q, d.T - t0)), r0 = 16 * (int(threadIdx.x) / 32);
  const bool last = c + 1 == d.nC;
  extern __shared__ __align__(16) unsigned char smem[];
  const BcSmem<T, kDC, kDB> s(smem, d);
  if (kDC) stage_tile(s.mb, s.ld, a.Bm + d.brow(b, t0, g) + n0, d.G * d.N, d.Q, kTile, rows, int(d.N - n0));
  if (kDB) stage_tile(s.mc, s.ld, a.Cm + d.brow(b, t0, g) + n0, d.G * d.N, d.Q, kTile, rows, int(d.N - n0));
  const T* cbt = a.cb + d.cb(b, c, g);
  // C_in, C_i,n+1 of the tile: from its staged copy (kDB) or global memory (0 past T or N).
  auto c_pair = [&](int i, int n) {
    if constexpr (kDB) {
      return load2(s.mc + i * s.ld + n);
    } else {
      const T* cr = a.Cm + d.brow(b, t0 + std::min(i, rows - 1), g) + n0 + n;
      const bool in = i < rows;
      return make_float2(in && n0 + n < d.N ? to_float(cr[0]) : 0.0f, in && n0 + n + 1 < d.N ? to_float(cr[1]) : 0.0f);
    }
  };
  Acc acc_c[8] = {}, acc_b[8] = {};
  for (int64_t h = g * d.hpg(); h < (g + 1) * d.hpg(); ++h) {
    // Every block of the group forms the same dB products: head h's da sums come from the n-tile of
    // h's index in the group modulo nt, so that the blocks share that work alike.
    const bool with_da = kDB && (h - g * d.hpg()) % d.nt == int64_t(blockIdx.x);
    s.stage_head(a, b, h, c, n0);
    cp_async_commit();
    if (with_da)
      for (int i = int(threadIdx.x); i < warps * d.Q; i += int(blockDim.x)) s.cols[i] = 0.0f;
    cp_async_wait<0>();
    __syncthreads();
    if (kDC) dc_head(acc_c, s, d, c, r0, o_part + ((b * d.H + h) * d.nt + blockIdx.x) * d.TQ() + t0, c_pair);
    if (kDB) db_head(acc_b, s, d, last, cbt, with_da, r0);
    if (with_da) {  // da_diag_k = sum_{m<k} (a_m - b_m): thread k + 1 holds m = k's term
      __syncthreads();
      const int k = int(threadIdx.x), m = k - 1;
      float term = 0.0f;
      if (m >= 0 && m < d.Q) {
        term = s.rsum[m];
        for (int w = 0; w < warps; ++w) term -= s.cols[w * d.Q + m];
      }
      const float sum = block_prefix(term, s.red);
      if (k < rows) da_diag[(b * d.H + h) * d.TQ() + t0 + k] = sum;
    }
    __syncthreads();  // before the next head's tiles
  }
  if (kDC) store_rows(dC, acc_c, d, b, g, t0, r0, n0);
  if (kDB) store_rows(dB, acc_b, d, b, g, t0, r0, n0);
}

}  // namespace

template <class T>
void launch_bc(Exec& ex, const Args<T>& a, T* dC, T* dB, float* da_diag, float* o_part) {
  const Dims& d = a.d;
  const dim3 grid(unsigned(d.nt), unsigned(d.G), unsigned(d.B * d.nC));
  const int64_t e = sizeof(T), fused = bc_smem(d, e, true, true), smem_c = bc_smem(d, e, true, false),
                smem_b = bc_smem(d, e, false, true);
  // One kernel for both while it keeps as many blocks on an SM as the dB one alone (x and dy staged
  // once, not twice); else the two.
  const int n_fused = blocks_per_sm(&ssd_bc_kernel<T, true, true>, 2 * d.Q, fused, "ssd_bc_kernel smem");
  if (n_fused > 0 && n_fused >= blocks_per_sm(&ssd_bc_kernel<T, false, true>, 2 * d.Q, smem_b, "ssd_db_kernel smem")) {
    ssd_bc_kernel<T, true, true><<<grid, 2 * d.Q, size_t(fused), stream_of(ex)>>>(a, dC, dB, da_diag, o_part);
    check_launch("ssd_bc_kernel");
    return;
  }
  allow_smem(&ssd_bc_kernel<T, true, false>, smem_c, "ssd_dc_kernel smem");
  allow_smem(&ssd_bc_kernel<T, false, true>, smem_b, "ssd_db_kernel smem");
  ssd_bc_kernel<T, true, false><<<grid, 2 * d.Q, size_t(smem_c), stream_of(ex)>>>(a, dC, dB, da_diag, o_part);
  check_launch("ssd_dc_kernel");
  ssd_bc_kernel<T, false, true><<<grid, 2 * d.Q, size_t(smem_b), stream_of(ex)>>>(a, dC, dB, da_diag, o_part);
  check_launch("ssd_db_kernel");
}

template void launch_bc<float>(Exec&, const Args<float>&, float*, float*, float*, float*);
template void launch_bc<bf16>(Exec&, const Args<bf16>&, bf16*, bf16*, float*, float*);

}  // namespace hytra::cuda::ssd
