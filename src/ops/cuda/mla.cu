// Multi-latent attention's head assembly (ops.def mla_qkv_fwd / mla_qkv_bwd; docs/spec/mla.md): one block per
// token. The block computes its position's dr/2 cos/sin pairs once into shared memory (ops.def mla_qkv_fwd's fp32
// formulas; factor 1: rope_fwd's frequencies) and, in the forward, the rotated shared key k_pe; then its
// threads walk items of every head: rotated pair groups of the query (or of its gradient), and plain copies of
// q_nope, k_nope, v (zero padding past dv) or of their gradients. The backward sums the shared key's gradient
// over the heads in head order (one thread a channel, fp32) before rotating it back, as the CPU reference.
// Vector path: whole 16-byte groups when every width is a multiple of one (dr of two) and the tensors are
// aligned; else one element an item.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/rope_math.cuh"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 128;

struct MlaDims {
  int64_t T, H, dn, dr, dv, Dv, first;
  float base, factor, low, high, scale;
  bool interleaved;
  __host__ __device__ int64_t D() const { return dn + dr; }
};

// Token t's cos and sin of its dr/2 angles into cs (times scale; sin times sign).
__device__ void fill_angles(float2* cs, const MlaDims& d, int64_t t, float sign) {
  for (int64_t i = threadIdx.x; i < d.dr / 2; i += blockDim.x) {
    const float angle = float(d.first + t) * rope_inv_freq(i, d.dr, d.base, d.factor, d.low, d.high);
    cs[i] = make_float2(d.scale * cosf(angle), sign * d.scale * sinf(angle));
  }
}

// P pairs from pair i0 of the dr rotated channels at row: a[k], b[k] the two channels of pair i0 + k
// (rotate-half: (i, i + dr/2); interleaved: (2i, 2i + 1)).
template <int P, bool kInterleaved, class T>
__device__ void load_pairs(const T* row, const MlaDims& d, int64_t i0, float* a, float* b) {
  if constexpr (kInterleaved) {
    float x[2 * P];
    if constexpr (2 * P == kVec<T>)
      load_n<2 * P>(row + 2 * i0, x);
    else
      for (int k = 0; k < 2 * P; ++k) x[k] = float(row[2 * i0 + k]);
    for (int k = 0; k < P; ++k) a[k] = x[2 * k], b[k] = x[2 * k + 1];
  } else {
    load_v<P>(row + i0, a);
    load_v<P>(row + d.dr / 2 + i0, b);
  }
}

template <int P, bool kInterleaved, class T>
__device__ void store_pairs(T* row, const MlaDims& d, int64_t i0, const float* a, const float* b) {
  if constexpr (kInterleaved) {
    float x[2 * P];
    for (int k = 0; k < P; ++k) x[2 * k] = a[k], x[2 * k + 1] = b[k];
    if constexpr (2 * P == kVec<T>)
      store_n<2 * P>(row + 2 * i0, x);
    else
      for (int k = 0; k < 2 * P; ++k) row[2 * i0 + k] = T(x[k]);
  } else {
    store_v<P>(row + i0, a);
    store_v<P>(row + d.dr / 2 + i0, b);
  }
}

// Rotates item j's pairs of src's row into dst's row: C elements of either half (rotate-half) or C adjacent ones
// (interleaved) an item.
template <int C, bool kInterleaved, class T>
__device__ void rotate_item(T* dst, const T* src, const MlaDims& d, const float2* cs, int64_t j) {
  constexpr int P = C == 1 ? 1 : (kInterleaved ? C / 2 : C);  // pairs an item
  const int64_t i0 = j * P;
  float a[P], b[P], ya[P], yb[P];
  load_pairs<P, kInterleaved>(src, d, i0, a, b);
  for (int k = 0; k < P; ++k) {
    const float2 r = rope_rotate(a[k], b[k], cs[i0 + k]);
    ya[k] = r.x;
    yb[k] = r.y;
  }
  store_pairs<P, kInterleaved>(dst, d, i0, ya, yb);
}

// rotate_item for the pair layout d names.
template <int C, class T>
__device__ void rotate_item(T* dst, const T* src, const MlaDims& d, const float2* cs, int64_t j) {
  if (d.interleaved)
    rotate_item<C, true>(dst, src, d, cs, j);
  else
    rotate_item<C, false>(dst, src, d, cs, j);
}

template <int C, class T>
__device__ void copy_chunk(T* dst, const T* src) {
  float x[C];
  load_v<C>(src, x);
  store_v<C>(dst, x);
}

// The dr channels of src rotated into dst pair by pair, a thread a pair (the shared key: from global to shared
// memory in the forward, its gradient's sum back in the backward).
template <class Dst, class Src>
__device__ void rotate_row(Dst* dst, const Src* src, const MlaDims& d, const float2* cs) {
  for (int64_t i = threadIdx.x; i < d.dr / 2; i += blockDim.x) {
    const int64_t ia = d.interleaved ? 2 * i : i, ib = d.interleaved ? 2 * i + 1 : i + d.dr / 2;
    const float2 r = rope_rotate(float(src[ia]), float(src[ib]), cs[i]);
    dst[ia] = Dst(r.x);
    dst[ib] = Dst(r.y);
  }
}

// Rotation items a head: C elements a copy item moves (16 bytes, or 1); rotate_item's pairs an item.
template <int C>
__device__ int64_t rope_items(const MlaDims& d) {
  return d.dr / 2 / (C == 1 ? 1 : (d.interleaved ? C / 2 : C));
}

// Shared memory: cs (dr/2 float2), kpe (dr floats).
template <class T, int C>
__global__ void __launch_bounds__(kThreads)
    mla_qkv_fwd_kernel(T* Q, T* K, T* V, const T* q, const T* kv, const T* k_pe, MlaDims d) {
  extern __shared__ float2 cs[];
  float* kpe = reinterpret_cast<float*>(cs + d.dr / 2);
  const int64_t r = blockIdx.x, D = d.D(), W = d.dn + d.dv;
  fill_angles(cs, d, r % d.T, 1.0f);
  __syncthreads();
  rotate_row(kpe, k_pe + r * d.dr, d, cs);
  __syncthreads();
  const int64_t n_rope = rope_items<C>(d), n_nope = d.dn / C, n_pe = d.dr / C, n_v = d.Dv / C;
  const int64_t per_head = n_rope + 2 * n_nope + n_pe + n_v;
  for (int64_t e = threadIdx.x; e < d.H * per_head; e += blockDim.x) {
    const int64_t row = r * d.H + e / per_head;
    int64_t j = e % per_head;
    T* Qr = Q + row * D;
    T* Kr = K + row * D;
    if (j < n_rope) {
      rotate_item<C>(Qr, q + row * D + d.dn, d, cs, j);
    } else if ((j -= n_rope) < n_nope) {
      copy_chunk<C>(Qr + d.dr + j * C, q + row * D + j * C);
    } else if ((j -= n_nope) < n_pe) {
      float x[C];
      for (int k = 0; k < C; ++k) x[k] = kpe[j * C + k];
      store_v<C>(Kr + j * C, x);
    } else if ((j -= n_pe) < n_nope) {
      copy_chunk<C>(Kr + d.dr + j * C, kv + row * W + j * C);
    } else {
      j -= n_nope;
      T* Vr = V + row * d.Dv + j * C;
      if (j * C < d.dv) {
        copy_chunk<C>(Vr, kv + row * W + d.dn + j * C);
      } else {
        float x[C] = {};
        store_v<C>(Vr, x);
      }
    }
  }
}

// Shared memory: cs (dr/2 float2), pe (dr floats).
template <class T, int C>
__global__ void __launch_bounds__(kThreads)
    mla_qkv_bwd_kernel(T* dq, T* dkv, T* dk_pe, const T* dQ, const T* dK, const T* dV, MlaDims d) {
  extern __shared__ float2 cs[];
  float* pe = reinterpret_cast<float*>(cs + d.dr / 2);
  const int64_t r = blockIdx.x, D = d.D(), W = d.dn + d.dv;
  fill_angles(cs, d, r % d.T, -1.0f);
  for (int64_t i = threadIdx.x; i < d.dr; i += blockDim.x) {  // the shared key's gradient, heads in order
    float s = 0.0f;
    for (int64_t h = 0; h < d.H; ++h) s += float(dK[(r * d.H + h) * D + i]);
    pe[i] = s;
  }
  __syncthreads();
  rotate_row(dk_pe + r * d.dr, pe, d, cs);
  const int64_t n_rope = rope_items<C>(d), n_nope = d.dn / C, n_v = d.dv / C;
  const int64_t per_head = 2 * n_nope + n_rope + n_v;
  for (int64_t e = threadIdx.x; e < d.H * per_head; e += blockDim.x) {
    const int64_t row = r * d.H + e / per_head;
    int64_t j = e % per_head;
    const T* dQr = dQ + row * D;
    const T* dKr = dK + row * D;
    if (j < n_nope) {
      copy_chunk<C>(dq + row * D + j * C, dQr + d.dr + j * C);
    } else if ((j -= n_nope) < n_rope) {
      rotate_item<C>(dq + row * D + d.dn, dQr, d, cs, j);
    } else if ((j -= n_rope) < n_nope) {
      copy_chunk<C>(dkv + row * W + j * C, dKr + d.dr + j * C);
    } else {
      j -= n_nope;
      copy_chunk<C>(dkv + row * W + d.dn + j * C, dV + row * d.Dv + j * C);
    }
  }
}

MlaDims dims_of(const Tensor& Q, const Tensor& V, const Tensor& kv, const Tensor& k_pe, const Rotary& rot) {
  MlaDims d{};
  d.T = Q.size(1);
  d.H = Q.size(2);
  d.dr = k_pe.size(2);
  d.dn = Q.size(3) - d.dr;
  d.dv = kv.size(2) / d.H - d.dn;
  d.Dv = V.size(3);
  d.first = rot.first_position;
  d.base = float(rot.base);
  d.factor = float(rot.factor);
  d.low = float(rot.low);
  d.high = float(rot.high);
  d.scale = float(rot.scale);
  d.interleaved = rot.interleaved;
  return d;
}

// Whether every width is whole groups of C elements (dr two of them) and every tensor 16-byte aligned.
bool vector_path(const MlaDims& d, std::initializer_list<const Tensor*> ts, int64_t C) {
  bool ok = d.dn % C == 0 && d.dr % (2 * C) == 0 && d.dv % C == 0 && d.Dv % C == 0;
  for (const Tensor* t : ts) ok = ok && aligned16(t->raw());
  return ok;
}

// f(T{}, std::integral_constant<int, C>{}, blocks, smem): the tensors' element type (bf16 or fp32), the item width
// C (16 bytes where vector_path allows it over ts, else 1 element), one block a token.
template <class F>
void launch(const char* op, const Tensor& Q, const MlaDims& d, std::initializer_list<const Tensor*> ts, F f) {
  const int64_t tokens = Q.size(0) * Q.size(1);
  if (tokens == 0) return;
  HYTRA_CHECK(Q.dtype() == DType::F32 || Q.dtype() == DType::BF16, op, " on CUDA: unsupported dtype ", Q.desc());
  HYTRA_CHECK(tokens < (int64_t(1) << 31), op, " on CUDA: too many tokens (", tokens, ")");
  const size_t smem = size_t(d.dr / 2) * sizeof(float2) + size_t(d.dr) * sizeof(float);
  HYTRA_CHECK(smem <= 48 * 1024, op, " on CUDA: rope width ", d.dr, " too large");
  with_type_and_width(
      Q.dtype(), [&](int64_t v) { return vector_path(d, ts, v); },
      [&](auto t, auto c) { f(t, c, unsigned(tokens), smem); });
  check_launch(op);
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

}  // namespace

void mla_qkv_fwd(Exec& ex, Tensor& Q, Tensor& K, Tensor& V, const Tensor& q, const Tensor& kv, const Tensor& k_pe,
                 const Rotary& rot) {
  const MlaDims d = dims_of(Q, V, kv, k_pe, rot);
  const cudaStream_t s = stream_of(ex);
  launch("mla_qkv_fwd", Q, d, {&Q, &K, &V, &q, &kv}, [&](auto t, auto c, unsigned blocks, size_t smem) {
    using T = decltype(t);
    mla_qkv_fwd_kernel<T, c.value>
        <<<blocks, kThreads, smem, s>>>(ptr<T>(Q), ptr<T>(K), ptr<T>(V), ptr<T>(q), ptr<T>(kv), ptr<T>(k_pe), d);
  });
}

void mla_qkv_bwd(Exec& ex, Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Tensor& dQ, const Tensor& dK, const Tensor& dV,
                 const Rotary& rot) {
  const MlaDims d = dims_of(dQ, dV, dkv, dk_pe, rot);
  const cudaStream_t s = stream_of(ex);
  launch("mla_qkv_bwd", dQ, d, {&dq, &dkv, &dQ, &dK, &dV}, [&](auto t, auto c, unsigned blocks, size_t smem) {
    using T = decltype(t);
    mla_qkv_bwd_kernel<T, c.value>
        <<<blocks, kThreads, smem, s>>>(ptr<T>(dq), ptr<T>(dkv), ptr<T>(dk_pe), ptr<T>(dQ), ptr<T>(dK), ptr<T>(dV), d);
  });
}

}  // namespace hytra::cuda
