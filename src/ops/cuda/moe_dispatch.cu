// MoE token movement and expert activation on CUDA (ops.h "mixture-of-experts"; docs/spec/names.md §7,
// docs/spec/moe.md §4-§5). Formulas, clamp-gradient convention (closed intervals, as torch.clamp) and NaN handling are
// those of the CPU reference, ops/cpu/moe_dispatch.cpp; math in fp32, fp32/bf16 I/O, no atomics.
//   gather_rows: a row copy in the widest word (16, 8, 4, 2 or 1 bytes) dividing the row size and
//     aligning both buffers. The device cannot throw: an idx outside [0,N) fills its row with
//     all-ones bytes (NaN in every float dtype).
//   scatter_add_rows: block (n, column tile) owns y[n, tile]; each thread adds its columns of the
//     segment's x rows in j order to a zero fp32 accumulator and stores once (for fp32 bitwise the
//     CPU loop). A bad segment or row index gives NaN instead of an error.
//   moe_act_fwd: a grid-stride loop over units of W output columns of a row: W = 8 with 16-byte
//     I/O when F % 8 == 0, every buffer is 16-byte aligned and, for GLU kinds, the interleave I
//     (F for the plain layout) is a multiple of 8 (the unit's gates and linears are two 8-wide runs,
//     "wide") or 1, 2, 4 (the 16 h columns [2f, 2f+16) hold exactly the unit's gates and linears,
//     "narrow"); W = 1 otherwise.
//   moe_act_bwd: one block per row, threads over the same units; each thread sums its dprobs terms
//     in unit order, then block_sum: the order depends on F only, so results are run-to-run
//     identical. h is read with plain loads, so dh may alias h (each unit reads before it writes).
#include <algorithm>
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/expert_act.cuh"

namespace hytra::cuda {
namespace {

using Kind = ops::ExpertActivation;
using bf16_t = __nv_bfloat16;

constexpr int kThreads = 256;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16_t v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_f32(float& d, float v) { d = v; }
__device__ __forceinline__ void from_f32(bf16_t& d, float v) { d = __float2bfloat16_rn(v); }

__device__ __forceinline__ float nan_f32() { return __int_as_float(0x7fffffff); }

// ---- gather_rows -----------------------------------------------------------------------------------

template <class Word>
__device__ __forceinline__ Word all_ones() {
  if constexpr (sizeof(Word) == 16)
    return make_uint4(~0u, ~0u, ~0u, ~0u);
  else
    return Word(~Word(0));
}

// y (R, words) = x (N, words) rows idx (R), in units of Word.
template <class Word>
__global__ void gather_rows_kernel(Word* y, const Word* x, const int32_t* idx, int64_t R, int64_t N, int64_t words) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < R * words;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / words, id = idx[r];
    y[e] = id >= 0 && id < N ? x[id * words + e % words] : all_ones<Word>();
  }
}

template <class Word>
void launch_gather(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx, int64_t row_bytes) {
  const int64_t R = idx.size(0), words = row_bytes / int64_t(sizeof(Word));
  gather_rows_kernel<Word><<<grid_for(R * words, kThreads), kThreads, 0, stream_of(ex)>>>(
      static_cast<Word*>(y.raw()), static_cast<const Word*>(x.raw()), idx.data<int32_t>(), R, x.size(0), words);
  check_launch("gather_rows_kernel");
}

// ---- scatter_add_rows --------------------------------------------------------------------------------

// grid (N, column tiles); thread t of tile b owns columns [W (b blockDim + t), +W) of y (N,C).
template <class T, int W>
__global__ void scatter_add_rows_kernel(T* y, const T* x, const int32_t* offsets, const int32_t* rows, int64_t R,
                                        int64_t C) {
  const int64_t n = blockIdx.x, c0 = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * W;
  if (c0 >= C) return;
  const int64_t j0 = offsets[n], j1 = offsets[n + 1];
  const bool bad_segment = j0 < 0 || j0 > j1 || j1 > R;
  float acc[W];
#pragma unroll
  for (int i = 0; i < W; ++i) acc[i] = bad_segment ? nan_f32() : 0.0f;
  for (int64_t j = bad_segment ? j1 : j0; j < j1; ++j) {
    const int64_t row = rows[j];
    float v[W];
    if (row < 0 || row >= R) {
#pragma unroll
      for (int i = 0; i < W; ++i) v[i] = nan_f32();
    } else if constexpr (W == 1) {
      v[0] = to_f32(x[row * C + c0]);
    } else {
      load_n<W>(x + row * C + c0, v);
    }
#pragma unroll
    for (int i = 0; i < W; ++i) acc[i] += v[i];
  }
  if constexpr (W == 1)
    from_f32(y[n * C + c0], acc[0]);
  else
    store_n<W>(y + n * C + c0, acc);
}

template <class T, int W>
void launch_scatter(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows) {
  const int64_t N = y.size(0), C = y.size(1), units = C / W;
  const int threads = int(std::min<int64_t>(kThreads, (units + 31) / 32 * 32));
  const int64_t tiles = (units + threads - 1) / threads;
  HYTRA_CHECK(N < (int64_t(1) << 31) && tiles <= 65535, "scatter_add_rows on CUDA: too large, y ", y.desc());
  const dim3 grid{unsigned(N), unsigned(tiles)};
  scatter_add_rows_kernel<T, W>
      <<<grid, threads, 0, stream_of(ex)>>>(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()),
                                            offsets.data<int32_t>(), rows.data<int32_t>(), x.size(0), C);
  check_launch("scatter_add_rows_kernel");
}

// ---- moe_act_fwd / moe_act_bwd -------------------------------------------------------------------

struct ActArgs {
  void* out;           // y (R,F) forward; dh (R,W_h) backward
  float* dprobs;       // (R), backward only
  const void* dy;      // (R,F), backward only
  const void* h;       // (R,2F) GLU kinds, (R,F) others
  const float* probs;  // (R)
  Kind kind;
  int64_t R, F, I;      // I: GLU interleave, F for the plain layout
  float offset, clamp;  // linear_offset; clamp <= 0: none
};

// Gates g and linears u of output columns [f, f+W) from h row hr (see the file header for NI).
template <int W, int NI, class T>
__device__ __forceinline__ void load_glu(const T* hr, int64_t f, int64_t I, float* g, float* u) {
  if constexpr (W == 1) {
    const int64_t c = f / I * 2 * I + f % I;
    g[0] = to_f32(hr[c]);
    u[0] = to_f32(hr[c + I]);
  } else if constexpr (NI == 0) {
    const int64_t c = f / I * 2 * I + f % I;
    load_n_rw<W>(hr + c, g);
    load_n_rw<W>(hr + c + I, u);
  } else {
    float w[2 * W];
    load_n_rw<2 * W>(hr + 2 * f, w);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      g[i] = w[i / NI * 2 * NI + i % NI];
      u[i] = w[i / NI * 2 * NI + NI + i % NI];
    }
  }
}

// The inverse of load_glu: dg, du into the gate and linear columns of [f, f+W).
template <int W, int NI, class T>
__device__ __forceinline__ void store_glu(T* hr, int64_t f, int64_t I, const float* dg, const float* du) {
  if constexpr (W == 1) {
    const int64_t c = f / I * 2 * I + f % I;
    from_f32(hr[c], dg[0]);
    from_f32(hr[c + I], du[0]);
  } else if constexpr (NI == 0) {
    const int64_t c = f / I * 2 * I + f % I;
    store_n<W>(hr + c, dg);
    store_n<W>(hr + c + I, du);
  } else {
    float w[2 * W];
#pragma unroll
    for (int i = 0; i < W; ++i) {
      w[i / NI * 2 * NI + i % NI] = dg[i];
      w[i / NI * 2 * NI + NI + i % NI] = du[i];
    }
    store_n<2 * W>(hr + 2 * f, w);
  }
}

// Forward over units of W columns: y[r, f..f+W) = act(h)[r, f..f+W) * probs[r].
template <class T, int W, int NI, bool GLU>
__global__ void moe_act_fwd_kernel(ActArgs a) {
  const int64_t units = a.F / W, Wh = GLU ? 2 * a.F : a.F;
  T* y = static_cast<T*>(a.out);
  const T* h = static_cast<const T*>(a.h);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < a.R * units;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / units, f = e % units * W;
    const float p = a.probs[r];
    float o[W];
    if constexpr (GLU) {
      float g[W], u[W];
      load_glu<W, NI>(h + r * Wh, f, a.I, g, u);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const Glu in(g[i], u[i], a.offset, a.clamp);
        o[i] = act_value(a.kind, in.g) * in.u * p;
      }
    } else {
      load_v_rw<W>(h + r * Wh + f, o);
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = act_value(a.kind, o[i]) * p;
    }
    store_v<W>(y + r * a.F + f, o);
  }
}

// Backward, block r = row r: dh row and dprobs[r] (see the file header).
template <class T, int W, int NI, bool GLU>
__global__ void moe_act_bwd_kernel(ActArgs a) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x, units = a.F / W, Wh = GLU ? 2 * a.F : a.F;
  T* dh = static_cast<T*>(a.out) + r * Wh;
  const T* h = static_cast<const T*>(a.h) + r * Wh;
  const T* dy = static_cast<const T*>(a.dy) + r * a.F;
  const float p = a.probs[r];
  float dp = 0.0f;
  for (int64_t q = threadIdx.x; q < units; q += blockDim.x) {
    const int64_t f = q * W;
    float d[W];
    load_v_rw<W>(dy + f, d);
    if constexpr (GLU) {
      float g[W], u[W];
      load_glu<W, NI>(h, f, a.I, g, u);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const Glu in(g[i], u[i], a.offset, a.clamp);
        const float v = act_value(a.kind, in.g), dyp = d[i] * p;
        dp += v * in.u * d[i];
        g[i] = in.gate_in ? dyp * in.u * act_grad(a.kind, in.g) : 0.0f;
        u[i] = in.lin_in ? dyp * v : 0.0f;
      }
      store_glu<W, NI>(dh, f, a.I, g, u);
    } else {
      float x[W];
      load_v_rw<W>(h + f, x);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        dp += act_value(a.kind, x[i]) * d[i];
        x[i] = d[i] * p * act_grad(a.kind, x[i]);
      }
      store_v<W>(dh + f, x);
    }
  }
  dp = block_sum(dp, red);
  if (threadIdx.x == 0) a.dprobs[r] = dp;
}

// The unit layout (file header): W = 8 with NI in {0 (wide), 1, 2, 4 (narrow)}, else W = 1 (NI = -1).
int vector_layout(bool glu, int64_t F, int64_t I, std::initializer_list<const Tensor*> ts) {
  if (F % 8 != 0) return -1;
  for (const Tensor* t : ts)
    if (!aligned16(t->raw())) return -1;
  if (!glu || I % 8 == 0) return 0;
  return I == 1 || I == 2 || I == 4 ? int(I) : -1;
}

template <class T, int W, int NI, bool GLU>
void launch_act(bool fwd, Exec& ex, const ActArgs& a) {
  cudaStream_t s = stream_of(ex);
  if (fwd) {
    moe_act_fwd_kernel<T, W, NI, GLU><<<grid_for(a.R * (a.F / W), kThreads), kThreads, 0, s>>>(a);
    check_launch("moe_act_fwd_kernel");
  } else {
    const int64_t units = a.F / W;
    const int threads = int(std::clamp<int64_t>((units + 31) / 32 * 32, 32, kThreads));
    HYTRA_CHECK(a.R < (int64_t(1) << 31), "moe_act_bwd on CUDA: too many rows, ", a.R);
    moe_act_bwd_kernel<T, W, NI, GLU><<<unsigned(a.R), threads, 0, s>>>(a);
    check_launch("moe_act_bwd_kernel");
  }
}

template <class T, bool GLU>
void launch_act_layout(bool fwd, Exec& ex, const ActArgs& a, int layout) {
  switch (layout) {
    case 0: return launch_act<T, 8, 0, GLU>(fwd, ex, a);
    case 1: return launch_act<T, 8, 1, GLU>(fwd, ex, a);
    case 2: return launch_act<T, 8, 2, GLU>(fwd, ex, a);
    case 4: return launch_act<T, 8, 4, GLU>(fwd, ex, a);
    default: return launch_act<T, 1, 0, GLU>(fwd, ex, a);
  }
}

// Both directions: checks dtypes, picks the unit layout and the kernel instance.
void run_act(bool fwd, const char* op, Exec& ex, ActArgs a, DType dt, std::initializer_list<const Tensor*> io) {
  for (const Tensor* t : io)
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", t->desc());
  if (a.R == 0) return;  // F == 0 still runs: dprobs = 0
  const bool glu = a.kind == Kind::SwiGLU || a.kind == Kind::QuickGeGLU;
  const int layout = vector_layout(glu, a.F, a.I, io);
  if (dt == DType::BF16)
    glu ? launch_act_layout<bf16_t, true>(fwd, ex, a, layout) : launch_act_layout<bf16_t, false>(fwd, ex, a, layout);
  else
    glu ? launch_act_layout<float, true>(fwd, ex, a, layout) : launch_act_layout<float, false>(fwd, ex, a, layout);
}

}  // namespace

void gather_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx) {
  const int64_t row_bytes = x.size(1) * int64_t(dtype_size(x.dtype()));
  if (idx.size(0) == 0 || row_bytes == 0) return;
  const uintptr_t both = reinterpret_cast<uintptr_t>(y.raw()) | reinterpret_cast<uintptr_t>(x.raw());
  auto fits = [&](int64_t w) { return row_bytes % w == 0 && both % uintptr_t(w) == 0; };
  if (fits(16))
    launch_gather<uint4>(ex, y, x, idx, row_bytes);
  else if (fits(8))
    launch_gather<unsigned long long>(ex, y, x, idx, row_bytes);
  else if (fits(4))
    launch_gather<unsigned>(ex, y, x, idx, row_bytes);
  else if (fits(2))
    launch_gather<unsigned short>(ex, y, x, idx, row_bytes);
  else
    launch_gather<unsigned char>(ex, y, x, idx, row_bytes);
}

void scatter_add_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows) {
  HYTRA_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "scatter_add_rows on CUDA: unsupported dtype ",
              x.desc());
  const int64_t N = y.size(0), C = y.size(1);
  if (N * C == 0) return;
  const bool vec = C % 8 == 0 && aligned16(y.raw()) && aligned16(x.raw());
  if (x.dtype() == DType::BF16)
    vec ? launch_scatter<bf16_t, 8>(ex, y, x, offsets, rows) : launch_scatter<bf16_t, 1>(ex, y, x, offsets, rows);
  else
    vec ? launch_scatter<float, 8>(ex, y, x, offsets, rows) : launch_scatter<float, 1>(ex, y, x, offsets, rows);
}

namespace {
// The kernels' arguments; F is y's (forward) or dy's (backward) width.
ActArgs act_args(void* out, float* dprobs, const void* dy, const Tensor& h, const Tensor& probs, int64_t R,
                 int64_t F, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) {
  return {out, dprobs, dy, h.raw(), probs.data<float>(), act, R, F, glu_interleave > 0 ? glu_interleave : F,
          float(linear_offset), float(clamp)};
}
}  // namespace

void moe_act_fwd(Exec& ex, Tensor& y, const Tensor& h, const Tensor& probs, ops::ExpertActivation act,
                 int64_t glu_interleave, double linear_offset, double clamp) {
  const ActArgs a = act_args(y.raw(), nullptr, nullptr, h, probs, y.size(0), y.size(1), act, glu_interleave,
                             linear_offset, clamp);
  run_act(true, "moe_act_fwd", ex, a, h.dtype(), {&y, &h});
}

void moe_act_bwd(Exec& ex, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs,
                 ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) {
  const ActArgs a = act_args(dh.raw(), dprobs.data<float>(), dy.raw(), h, probs, dy.size(0), dy.size(1), act,
                             glu_interleave, linear_offset, clamp);
  run_act(false, "moe_act_bwd", ex, a, h.dtype(), {&dh, &dy, &h});
}

}  // namespace hytra::cuda
