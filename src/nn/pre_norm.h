// PreNormModule: a sub-layer whose first step is its own input norm, f(x) = body(norm(x))
// (attention and MLP here; Megatron's TE spec fuses that norm into the first GEMM's keys).
// forward/backward run the norm and the body; the model may instead run the norm itself, fused
// with the residual add that produced x (Norm::forward_add / backward_add: one kernel each for
// RMSNorm), and call the body directly. Both routes compute the same values.
#pragma once
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/tensor_parallel.h"

namespace hytra {

// The options every pre-norm sub-layer takes from the model config (one copy, model/layer_kinds.cpp):
// its input norm and the initialisation of its input and output projections. Each layer's options
// struct derives from it.
struct PreNormOptions {
  NormKind norm = NormKind::RMSNorm;  // --normalization
  double norm_eps = 1e-5;             // --norm-epsilon
  double init_std = 0.02;             // input projections (--init-method-std)
  double output_init_std = 0.02;      // output projections (Megatron: init_std / sqrt(2 x layers))
  TensorParallel tp;                  // the layer's tensor-parallel group (nn/tensor_parallel.h)
};

class PreNormModule : public Module {
 public:
  Tensor forward(StepContext& ctx, const Tensor& x) override { return forward_body(ctx, input_norm().forward(ctx, x)); }
  Tensor backward(StepContext& ctx, const Tensor& dy) override {
    return input_norm().backward(ctx, backward_body(ctx, dy));
  }

  virtual Norm& input_norm() = 0;
  // f from the normalised input y = norm(x) (same shape as x).
  virtual Tensor forward_body(StepContext& ctx, const Tensor& y) = 0;
  // dL/dy from dL/df.
  virtual Tensor backward_body(StepContext& ctx, const Tensor& df) = 0;
};

}  // namespace hytra
