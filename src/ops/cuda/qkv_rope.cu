// Fused QKV split + rotary (ops.h "fused QKV split + rotary"): one pass over the grouped QKV
// projection instead of three slice copies and two rotary passes (and the reverse in backward).
// Head-row hr of the projection, viewed as (B*T*Hkv, R+2, D), is slot hr % (R+2) of KV group
// g = (hr / (R+2)) % Hkv of token hr / ((R+2) Hkv): slots < R are query heads g*R + slot, slot R is
// k, slot R+1 is v. One thread per (head-row, unit): units < R/2 are rotary pairs (rotate-half
// (i, i+R/2) or interleaved (2i, 2i+1)), rotated for q and k, copied for v; the remaining units
// copy channel pairs >= R. Angles as rope.cu (fp32 inv_freq and angle, Megatron), computed once
// per call into a (T, R/2) cos/sin table that the main pass reads from L2.
// Fast path (rotate-half, R = D, D % 16 == 0, 16-byte aligned): one thread moves 8 pairs with two
// 16-byte loads and stores; the general kernel handles everything else one pair at a time.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/rope_math.cuh"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

struct QkvGeom {
  int64_t T, Hkv, R, D, rot;  // rot = rotary_dim
  __host__ __device__ int64_t units() const { return rot / 2 + (D - rot + 1) / 2; }
};

// table[t * R/2 + i] = (cos, sin) of t * inv_freq[i].
__global__ void rope_table_kernel(float2* table, int64_t T, int64_t rot, float base) {
  const int64_t half = rot / 2;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < T * half; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / half, i = e % half;
    const float inv_freq = rope_inv_freq(i, rot, base);
    const float angle = float(t) * inv_freq;
    table[e] = make_float2(cosf(angle), sinf(angle));
  }
}

// Where head-row hr of the grouped projection lives in q, k or v.
struct HeadRow {
  int64_t slot, pos, other_row;
};
__device__ __forceinline__ HeadRow locate(int64_t hr, const QkvGeom& g) {
  const int64_t slot = hr % (g.R + 2), grp_row = hr / (g.R + 2);
  return {slot, (grp_row / g.Hkv) % g.T, slot < g.R ? grp_row * g.R + slot : grp_row};
}

// Fast path: 8 rotate-half pairs (i .. i+7, i+R/2 .. i+R/2+7) per thread, bf16 or fp32.
template <bool kForward, class T>
__global__ void qkv_rope_vec_kernel(T* grouped, T* q, T* k, T* v, const float2* table, int64_t head_rows, QkvGeom g) {
  const int64_t half = g.D / 2, per_row = half / 8, total = head_rows * per_row;
  const float sign = kForward ? 1.0f : -1.0f;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hr = e / per_row, i = (e % per_row) * 8;
    const HeadRow h = locate(hr, g);
    T* other = (h.slot < g.R ? q : (h.slot == g.R ? k : v)) + h.other_row * g.D;
    T* row = grouped + hr * g.D;
    const T* src = kForward ? row : other;
    T* dst = kForward ? other : row;
    float a[8], b[8];
    load_n<8>(src + i, a);
    load_n<8>(src + i + half, b);
    if (h.slot <= g.R) {
      const float2* cs = table + h.pos * half + i;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float c = cs[j].x, s = sign * cs[j].y, xa = a[j], xb = b[j];
        a[j] = xa * c - xb * s;
        b[j] = xb * c + xa * s;
      }
    }
    store_n<8>(dst + i, a);
    store_n<8>(dst + i + half, b);
  }
}

// forward: grouped (src) -> q/k/v (dst); backward: dq/dk/dv (src) -> grouped (dst), sign -1.
template <bool kForward>
__global__ void qkv_rope_kernel(void* grouped, void* q, void* k, void* v, DType t, const float2* table,
                                int64_t head_rows, QkvGeom g, bool interleaved) {
  const int64_t units = g.units(), half = g.rot / 2, total = head_rows * units;
  const float sign = kForward ? 1.0f : -1.0f;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hr = e / units, u = e % units;
    const HeadRow h = locate(hr, g);
    void* other = h.slot < g.R ? q : (h.slot == g.R ? k : v);
    const int64_t gbase = hr * g.D, obase = h.other_row * g.D;
    int64_t ia, ib;
    bool rotate = false;
    if (u < half) {
      ia = interleaved ? 2 * u : u;
      ib = interleaved ? 2 * u + 1 : u + half;
      rotate = h.slot <= g.R;
    } else {
      ia = g.rot + 2 * (u - half);
      ib = ia + 1 < g.D ? ia + 1 : -1;
    }
    const void* src = kForward ? grouped : other;
    void* dst = kForward ? other : grouped;
    const int64_t sbase = kForward ? gbase : obase, dbase = kForward ? obase : gbase;
    const float xa = load_f(src, t, sbase + ia);
    const float xb = ib >= 0 ? load_f(src, t, sbase + ib) : 0.0f;
    if (rotate) {
      const float2 cs = table[h.pos * half + u];
      const float c = cs.x, s = sign * cs.y;
      store_f(dst, t, dbase + ia, xa * c - xb * s);
      store_f(dst, t, dbase + ib, xb * c + xa * s);
    } else {
      store_f(dst, t, dbase + ia, xa);
      if (ib >= 0) store_f(dst, t, dbase + ib, xb);
    }
  }
}

template <bool kForward>
void launch(Exec& ex, const Tensor& grouped, const Tensor& q, const Tensor& k, const Tensor& v, int64_t rotary_dim,
            double base, bool interleaved) {
  HYTRA_CHECK(q.dtype() == DType::F32 || q.dtype() == DType::BF16, "qkv_rope on CUDA: unsupported dtype ", q.desc());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2);
  const QkvGeom g{T, Hkv, H / Hkv, D, rotary_dim};
  const int64_t head_rows = B * T * Hkv * (g.R + 2);
  cudaStream_t s = stream_of(ex);
  Tensor table = Tensor::empty({T * rotary_dim}, DType::F32, Device::CUDA);  // (T, R/2) float2
  float2* tab = reinterpret_cast<float2*>(table.data<float>());
  rope_table_kernel<<<grid_for(T * rotary_dim / 2, kThreads), kThreads, 0, s>>>(tab, T, rotary_dim, float(base));
  check_launch("rope_table_kernel");
  const bool vec = !interleaved && rotary_dim == D && D % 16 == 0 &&
                   aligned16(grouped.raw()) && aligned16(q.raw()) && aligned16(k.raw()) && aligned16(v.raw());
  if (vec && q.dtype() == DType::BF16) {
    using T16 = __nv_bfloat16;
    qkv_rope_vec_kernel<kForward, T16><<<grid_for(head_rows * (D / 16), kThreads), kThreads, 0, s>>>(
        static_cast<T16*>(grouped.raw()), q.data<T16>(), k.data<T16>(), v.data<T16>(), tab, head_rows, g);
  } else if (vec) {
    qkv_rope_vec_kernel<kForward, float><<<grid_for(head_rows * (D / 16), kThreads), kThreads, 0, s>>>(
        grouped.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), tab, head_rows, g);
  } else {
    qkv_rope_kernel<kForward><<<grid_for(head_rows * g.units(), kThreads), kThreads, 0, s>>>(
        grouped.raw(), q.raw(), k.raw(), v.raw(), q.dtype(), tab, head_rows, g, interleaved);
  }
  check_launch(kForward ? "qkv_rope_fwd" : "qkv_rope_bwd");
}

}  // namespace

void qkv_rope_fwd(Exec& ex, Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t rotary_dim, double base,
                  bool interleaved) {
  launch<true>(ex, qkv, q, k, v, rotary_dim, base, interleaved);
}

void qkv_rope_bwd(Exec& ex, Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t rotary_dim,
                  double base, bool interleaved) {
  launch<false>(ex, dqkv, dq, dk, dv, rotary_dim, base, interleaved);
}

}  // namespace hytra::cuda
