// The expert activations of the MoE MLP on CUDA (ops.def moe_act_fwd; docs/spec/moe.md §5), shared by
// moe_act_fwd/bwd and the grouped GEMM's fused GLU epilogue so both compute the same bits. The GLU gates use
// fast_sigmoid (relative error about 1e-6, far below bf16's rounding): the fused epilogue evaluates one per
// output element.
#pragma once
#include "ops/cuda/common.cuh"
#include "ops/op_types.h"

namespace hytra::cuda {

__device__ __forceinline__ float normal_cdf(float v) { return 0.5f * (1.0f + erff(v * 0.70710678118654752f)); }

// act(v): the gate function of a GLU kind (v sigmoid(k v)), or the whole activation of the others.
__device__ __forceinline__ float act_value(ops::ExpertActivation k, float v) {
  switch (k) {
    case ops::ExpertActivation::GeLU: return v * normal_cdf(v);
    case ops::ExpertActivation::SquaredReLU: return v > 0.0f ? v * v : 0.0f;
    case ops::ExpertActivation::QuickGeGLU: return v * fast_sigmoid(1.702f * v);
    default: return v * fast_sigmoid(v);
  }
}

// act'(v).
__device__ __forceinline__ float act_grad(ops::ExpertActivation k, float v) {
  switch (k) {
    case ops::ExpertActivation::GeLU: return normal_cdf(v) + v * 0.39894228040143268f * expf(-0.5f * v * v);
    case ops::ExpertActivation::SquaredReLU: return v > 0.0f ? 2.0f * v : 0.0f;
    default: {
      const float a = k == ops::ExpertActivation::QuickGeGLU ? 1.702f : 1.0f, s = fast_sigmoid(a * v);
      return s * (1.0f + a * v * (1.0f - s));
    }
  }
}

// The clamped GLU inputs of one output column, as the CPU reference's GluInputs.
struct Glu {
  float g, u;
  bool gate_in, lin_in;
  __device__ __forceinline__ Glu(float gate, float lin, float offset, float L) {
    const bool on = L > 0.0f;
    g = on && gate > L ? L : gate;
    u = (on && lin > L ? L : on && lin < -L ? -L : lin) + offset;
    gate_in = !on || gate <= L;
    lin_in = !on || (lin >= -L && lin <= L);
  }
};

}  // namespace hytra::cuda
