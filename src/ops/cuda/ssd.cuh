// Pieces shared by the chunked SSD kernels (the algorithm: ssd_fwd.cu's header): the sizes of one call,
// the arguments every kernel reads, the shared-memory budget that picks the chunk length, and the
// launchers of the kernels both directions run (ssd_state.cu).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/warp_mma.cuh"
#include "ops/exec.h"

namespace hytra::cuda::ssd {

constexpr int kTile = 64;   // width of the P, N and chunk tiles
constexpr int kMaxQ = 256;  // longest chunk (16 warps of 16 rows)
constexpr int kMaxWarps = kMaxQ / 16;
constexpr float kLog2e = 1.4426950408889634f;

// Sizes of one call. The kernels run chunks of Q steps (chunk_size rounded down to 64, 128 or 256,
// halved while the shared memory would not fit: the chunking changes only the rounding). Rows past
// T, columns past P or N are zeros in every tile.
struct Dims {
  int64_t B = 0, T = 0, H = 0, G = 0, P = 0, N = 0;
  int Q = 64;
  int nC = 0;          // chunks, ceil(T / Q)
  int Pk = 0;          // P rounded up to 16 (the k extent of products over p)
  int pt = 0, nt = 0;  // 64-wide tiles over P and N
  int64_t ldt = 0;     // row pitch of dt_raw (row-pitched: a column range of the Mamba in_proj output)
  __host__ __device__ int64_t hpg() const { return H / G; }
  __host__ __device__ int64_t TQ() const { return int64_t(nC) * Q; }  // pitch of the per-step scratch
  __host__ __device__ int SP() const { return pt * kTile; }           // rows of a stored state
  __host__ __device__ int SN() const { return nt * kTile; }           // columns of a stored state
  // Offset of the stored (SP, SN) state of (b, h, chunk c).
  __host__ __device__ int64_t state(int64_t b, int64_t h, int64_t c) const {
    return ((b * H + h) * nC + c) * int64_t(SP()) * SN();
  }
  // Offset of row t of head h / group g in x, dy (B,T,H,P) and Bm, Cm (B,T,G,N).
  __host__ __device__ int64_t xrow(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * P; }
  __host__ __device__ int64_t brow(int64_t b, int64_t t, int64_t g) const { return ((b * T + t) * G + g) * N; }
  // Offset of the (Q,Q) C.B block of (b, chunk c, group g).
  __host__ __device__ int64_t cb(int64_t b, int64_t c, int64_t g) const { return ((b * nC + c) * G + g) * Q * Q; }
};

// What the kernels read. Scratch: cb (B,nC,G,Q,Q); states, dstates (B,H,nC,SP,SN); dt, cum (B,H,TQ).
template <class T>
struct Args {
  Dims d;
  const T* x = nullptr;            // (B,T,H,P)
  const T* dt_raw = nullptr;       // (B,T,H)
  const T* Bm = nullptr;           // (B,T,G,N)
  const T* Cm = nullptr;           // (B,T,G,N)
  const T* dy = nullptr;           // (B,T,H,P), backward
  const float* dt_bias = nullptr;  // (H)
  const float* A_log = nullptr;    // (H)
  const float* D = nullptr;        // (H)
  float* dt = nullptr;             // dt per step, 0 past T
  float* cum = nullptr;            // inclusive sum of dt*A/ln 2 within the chunk (decays: exp2 of differences)
  T* cb = nullptr;                 // forward [i][j] = C_i.B_j; backward [j][i] = B_j.C_i
  T* states = nullptr;             // the state entering each chunk
  T* dstates = nullptr;            // dL/d(the state leaving each chunk), backward
  bool kept = false;               // dt, cum and states are the forward's (the backward skips remaking them)
};

// Shared-memory bytes of a (rows, width) tile and of each kernel (ssd_state.cu, ssd_fwd.cu, ssd_bwd*.cu).
inline int64_t tile_bytes(int64_t rows, int64_t width, int64_t elem) { return rows * (width + 16 / elem) * elem; }
inline int64_t scalar_bytes(const Dims& d) { return 2 * int64_t(d.Q) * 4; }  // dt and cum of one chunk
inline int64_t scan_smem(const Dims& d, int64_t e, bool reverse) {
  return 2 * (2 * tile_bytes(d.Q, kTile, e) + scalar_bytes(d)) + int64_t(d.Q) * 4 + 16 +
         (reverse ? 2 * tile_bytes(kTile, kTile, e) : 0);
}
// out with `bufs` (1 or 2) of state_product's tiles; dx with 1.
inline int64_t out_smem(const Dims& d, int64_t e, int bufs) {
  return (1 + bufs) * tile_bytes(d.Q, kTile, e) + tile_bytes(d.Q, d.Q, e) + bufs * tile_bytes(kTile, kTile, e) +
         scalar_bytes(d);
}
inline int64_t dx_smem(const Dims& d, int64_t e) { return out_smem(d, e, 1) + kMaxWarps * 4; }
// The dC / dB kernel doing dC, dB or both (ssd_bwd_bc.cu).
inline int64_t bc_smem(const Dims& d, int64_t e, bool dc, bool db) {
  const int roles = int(dc) + int(db);
  return roles * (tile_bytes(d.Q, kTile, e) + tile_bytes(d.Pk, kTile, e)) + 2 * tile_bytes(d.Q, d.Pk, e) +
         scalar_bytes(d) + (db ? (int64_t(d.Q / 16 + 1) * d.Q + 32) * 4 : 0);
}
inline int64_t cb_smem(int64_t e) { return 2 * tile_bytes(kTile, kTile, e); }

// The device's shared memory a block may opt in to.
int smem_limit();

// Blocks of `kernel` (threads, smem bytes) resident on one SM; 0 when smem is past smem_limit(). Leaves
// the kernel's dynamic shared-memory limit at smem (launch after allow_smem with the size chosen).
template <class K>
int blocks_per_sm(K kernel, int threads, int64_t smem, const char* name) {
  if (smem > smem_limit()) return 0;
  allow_smem(kernel, smem, name);
  int n = 0;
  cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, size_t(smem)), name);
  return n;
}
// state_product's buffers for a kernel whose shared memory with b of them is smem_of(b): 2 where
// that keeps as many blocks on an SM as 1.
template <class K, class F>
int product_bufs(K kernel, int threads, F smem_of, const char* name) {
  return blocks_per_sm(kernel, threads, smem_of(2), name) >= blocks_per_sm(kernel, threads, smem_of(1), name) ? 2 : 1;
}
// The sizes of a call with x (B,T,H,P), Bm (B,T,G,N): Q from chunk_size and the device's shared memory.
Dims make_dims(const Tensor& x, const Tensor& Bm, int64_t chunk_size);

// Checks what the kernels support, allocates the scratch both directions use (dt, cum, C.B, states;
// dstates when `backward`) or takes dt, cum and states from `kept` (what a forward left in its `keep`),
// and calls f(Args<T>&) with T = float or bf16 (x's dtype). Nothing for empty tensors.
template <class F>
void with_args(const char* op, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
               const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, const Tensor* dy, int64_t chunk_size,
               std::vector<Tensor>* keep, const std::vector<Tensor>* kept, F&& f) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", x.desc());
  HYTRA_CHECK(Bm.size(3) >= 1, op, " on CUDA: state N must be at least 1, got ", Bm.desc());
  if (x.numel() == 0) return;
  Dims d = make_dims(x, Bm, chunk_size);
  d.ldt = dt_raw.row_pitch();
  HYTRA_CHECK(d.B * d.nC <= 65535 && d.H <= 65535, op, " on CUDA: B * T / chunk = ", d.B * d.nC, " and H = ", d.H,
              " must be at most 65535 (grid)");
  const DType t = x.dtype();
  const Device cu = Device::CUDA;
  const Shape step_shape{d.B, d.H, d.TQ()};                      // (B,H,T')
  const Shape state_shape{d.B, d.H, d.nC, d.SP(), d.SN()};       // (B,H,nC,P',N')
  Tensor cb = Tensor::empty({d.B, d.nC, d.G, d.Q, d.Q}, t, cu);  // (B,nC,G,Q,Q)
  Tensor dt, cum, states;
  if (kept != nullptr) {
    HYTRA_CHECK(kept->size() == 3 && (*kept)[0].shape() == step_shape && (*kept)[1].shape() == step_shape &&
                    (*kept)[0].dtype() == DType::F32 && (*kept)[1].dtype() == DType::F32 &&
                    (*kept)[2].shape() == state_shape && (*kept)[2].dtype() == t &&
                    (*kept)[2].device() == Device::CUDA,
                op, ": `kept` is not what ssd_chunk_scan_fwd of inputs shaped like these keeps");
    dt = (*kept)[0];
    cum = (*kept)[1];
    states = (*kept)[2];
  } else {
    dt = Tensor::empty(step_shape, DType::F32, cu);
    cum = Tensor::empty(step_shape, DType::F32, cu);
    states = Tensor::empty(state_shape, t, cu);
  }
  if (keep != nullptr) *keep = {dt, cum, states};
  Tensor dstates = dy != nullptr ? Tensor::empty(state_shape, t, cu) : Tensor();
  auto go = [&](auto tag) {
    using T = decltype(tag);
    Args<T> a;
    a.d = d;
    a.x = static_cast<const T*>(x.raw());
    a.dt_raw = static_cast<const T*>(dt_raw.raw());
    a.Bm = static_cast<const T*>(Bm.raw());
    a.Cm = static_cast<const T*>(Cm.raw());
    a.dy = dy != nullptr ? static_cast<const T*>(dy->raw()) : nullptr;
    a.dt_bias = dt_bias.data<float>();
    a.A_log = A_log.data<float>();
    a.D = D.data<float>();
    a.dt = dt.data<float>();
    a.cum = cum.data<float>();
    a.cb = static_cast<T*>(cb.raw());
    a.states = static_cast<T*>(states.raw());
    a.dstates = dy != nullptr ? static_cast<T*>(dstates.raw()) : nullptr;
    a.kept = kept != nullptr;
    f(a);
  };
  if (t == DType::BF16)
    go(bf16{});
  else
    go(float{});
}

// ---- device helpers ----------------------------------------------------------------------------
// 2^v by one MUFU.EX2: exp2f's value, except that results below 2^-126 (decays that small) flush to 0.
__device__ __forceinline__ float exp2_ftz(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// dt (s_dt) and cum (s_cum) of chunk c of (b, h), copied like a tile (commit and wait by the caller).
template <class T>
__device__ __forceinline__ void stage_scalars(float* s_dt, float* s_cum, const Args<T>& a, int64_t b, int64_t h,
                                              int64_t c) {
  const int64_t off = (b * a.d.H + h) * a.d.TQ() + c * a.d.Q;
  stage_tile(s_dt, a.d.Q, a.dt + off, a.d.Q, 1, a.d.Q, 1, a.d.Q);
  stage_tile(s_cum, a.d.Q, a.cum + off, a.d.Q, 1, a.d.Q, 1, a.d.Q);
}

// acc (chunk rows r0.. of this warp, 64 columns: one row of st each) += sum over n of
// M[t0 + row][n] st[col][n] (M: Bm or Cm of group g, rows past `rows` zero; st: a stored state at its
// 64-row block), in steps of 64 over N through the shared tiles sm (Q, 64 + kPad) and ss (64, 64 + kPad),
// `bufs` (1 or 2) of each back to back: with 2, the next step's tiles are copied during this one's products.
// Every thread of the block calls it; it commits and waits for all its copies (earlier ones too).
template <class T>
__device__ __forceinline__ void state_product(Acc (&acc)[8], const Args<T>& a, T* sm, T* ss, int bufs, const T* M,
                                              const T* st, int64_t b, int64_t t0, int64_t g, int rows, int r0) {
  const Dims& d = a.d;
  constexpr int ld = kTile + kPad<T>;
  auto stage = [&](int n0) {
    const int buf = (n0 / kTile) % bufs;
    stage_tile(sm + buf * d.Q * ld, ld, M + d.brow(b, t0, g) + n0, d.G * d.N, d.Q, kTile, rows, int(d.N - n0));
    stage_tile(ss + buf * kTile * ld, ld, st + n0, d.SN(), kTile, kTile, kTile, kTile);
    cp_async_commit();
  };
  stage(0);
  for (int n0 = 0; n0 < d.N; n0 += kTile) {
    const bool next = n0 + kTile < d.N, ahead = next && bufs > 1;
    if (ahead) {
      stage(n0 + kTile);  // into the buffer the step before this one read (synchronised after it)
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int buf = (n0 / kTile) % bufs;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragA<T> fa;
      load_a<true>(fa, sm + buf * d.Q * ld, ld, r0, 16 * kk);
      mma_x64<true>(acc, fa, ss + buf * kTile * ld, ld, 16 * kk);
    }
    __syncthreads();
    if (next && !ahead) stage(n0 + kTile);
  }
}

// Inclusive prefix sum over the block's threads in thread order (fixed order: deterministic);
// `red` holds 32 floats. Every thread of the block calls it.
__device__ __forceinline__ float block_prefix(float v, float* red) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  __syncthreads();  // a previous call may still be reading red
  if (lane == 31) red[warp] = v;
  __syncthreads();
  float off = 0.0f;
  for (int w = 0; w < warp; ++w) off += red[w];
  return v + off;
}

// ---- launchers of the kernels both directions run (ssd_state.cu) ---------------------------------
// dt and cum for every step.
template <class T>
void launch_dt(Exec& ex, const Args<T>& a);
// a.cb: C_i.B_j (forward) or, with `transposed`, B_j.C_i (backward), the blocks each direction reads.
template <class T>
void launch_cb(Exec& ex, const Args<T>& a, bool transposed);
// a.states (forward) or, with `reverse`, a.dstates and e_part (B,H,nC,pt*nt) = the tiles' shares
// of exp(cumL) <dS leaving c, S entering c> (reads a.states).
template <class T>
void launch_scan(Exec& ex, const Args<T>& a, bool reverse, float* e_part);
// Backward group kernels (ssd_bwd_bc.cu): dC, dB, da_diag (B,H,T') = the diagonal blocks' share of da,
// and o_part (B,H,nt,T') = the 64-column tiles' shares of o_i = exp(cum_i) dy_i.S_{c-1} C_i (ssd_bwd.cu).
template <class T>
void launch_bc(Exec& ex, const Args<T>& a, T* dC, T* dB, float* da_diag, float* o_part);

}  // namespace hytra::cuda::ssd
