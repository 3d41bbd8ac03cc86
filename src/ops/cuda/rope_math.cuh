// What the CUDA rotary kernels share (rope.cu, qkv_rope.cu, decode.cu, mla.cu): the fp32 frequency of a rotated
// pair and a pair's rotation, with the CPU reference's formulas (ops/cpu/rope_math.h; ops.def rope_fwd and
// mla_qkv_fwd).
#pragma once
#include <cstdint>

namespace hytra::cuda {

// Pair i of R rotated channels: 1 / base^(2i/R); with factor != 1 YaRN's blend of that and it divided by factor over
// the ramp from pair low to pair high.
__device__ __forceinline__ float rope_inv_freq(int64_t i, int64_t R, float base, float factor = 1.0f,
                                               float low = 0.0f, float high = 1.0f) {
  const float extra = 1.0f / powf(base, float(2 * i) / float(R));
  if (factor == 1.0f) return extra;
  const float ramp = fminf(fmaxf((float(i) - low) / (high - low), 0.0f), 1.0f);
  return extra / factor * ramp + extra * (1.0f - ramp);
}

// The pair (a, b) rotated by cs = (cos, sin): (a cos - b sin, b cos + a sin).
__device__ __forceinline__ float2 rope_rotate(float a, float b, float2 cs) {
  return make_float2(a * cs.x - b * cs.y, b * cs.x + a * cs.y);
}

}  // namespace hytra::cuda
