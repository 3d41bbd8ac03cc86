// Fused QKV split + rotary (ops.h "fused QKV split + rotary"): one pass over the grouped QKV
// projection instead of three slice copies and two rotary passes (and the reverse in backward).
// Head-row hr of the projection, viewed as (B*T*Hkv, R+2, D), is slot hr % (R+2) of KV group
// g = (hr / (R+2)) % Hkv of token hr / ((R+2) Hkv): slots < R are query heads g*R + slot, slot R is
// k, slot R+1 is v. One thread per (head-row, unit): units < R/2 are rotary pairs (rotate-half
// (i, i+R/2) or interleaved (2i, 2i+1)), rotated for q and k, copied for v; the remaining units
// copy channel pairs >= R. Angles as rope.cu (fp32 inv_freq and angle, Megatron).
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

struct QkvGeom {
  int64_t T, Hkv, R, D, rot;  // rot = rotary_dim
  __host__ __device__ int64_t units() const { return rot / 2 + (D - rot + 1) / 2; }
};

// forward: grouped (src) -> q/k/v (dst); backward: dq/dk/dv (src) -> grouped (dst), sign -1.
template <bool kForward>
__global__ void qkv_rope_kernel(void* grouped, void* q, void* k, void* v, DType t, int64_t head_rows, QkvGeom g,
                                float base, bool interleaved) {
  const int64_t units = g.units(), half = g.rot / 2, total = head_rows * units;
  const float sign = kForward ? 1.0f : -1.0f;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hr = e / units, u = e % units;
    const int64_t slot = hr % (g.R + 2), grp_row = hr / (g.R + 2);
    const int64_t pos = (grp_row / g.Hkv) % g.T;
    void* other = slot < g.R ? q : (slot == g.R ? k : v);
    const int64_t other_row = slot < g.R ? grp_row * g.R + slot : grp_row;
    const int64_t gbase = hr * g.D, obase = other_row * g.D;
    int64_t ia, ib;
    bool rotate = false;
    if (u < half) {
      ia = interleaved ? 2 * u : u;
      ib = interleaved ? 2 * u + 1 : u + half;
      rotate = slot <= g.R;
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
      const float inv_freq = 1.0f / powf(base, float(2 * u) / float(g.rot));
      const float angle = float(pos) * inv_freq;
      const float c = cosf(angle), s = sign * sinf(angle);
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
  qkv_rope_kernel<kForward><<<grid_for(head_rows * g.units(), kThreads), kThreads, 0, stream_of(ex)>>>(
      grouped.raw(), q.raw(), k.raw(), v.raw(), q.dtype(), head_rows, g, float(base), interleaved);
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
