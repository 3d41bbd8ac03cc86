// MLP (`-`): f(x) = linear_fc2(act(linear_fc1(norm(x)))). Keys under the layer prefix (SPEC.md A2.1):
// mlp.linear_fc1.layer_norm_weight (fused pre-norm), mlp.linear_fc1.weight — (2F, C) for SwiGLU with
// rows 0..F-1 the gate (activated) half and F..2F-1 the linear half, (F, C) otherwise —
// mlp.linear_fc2.weight (C, F), biases with add_bias_linear.
#pragma once
#include <memory>
#include <string>

#include "nn/linear.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"

namespace hytra {

enum class Activation { SwiGLU, GeLU, SquaredReLU };

struct MlpOptions {
  int64_t hidden = 0, ffn = 0;  // C, F
  Activation activation = Activation::GeLU;
  bool bias = false;
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-5;
  double init_std = 0.02;         // linear_fc1
  double output_init_std = 0.02;  // linear_fc2 (Megatron: std / sqrt(2 L))
};

class Mlp : public PreNormModule {
 public:
  Mlp(const MlpOptions& opt, const std::string& prefix, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override;  // y = norm(x) (B,T,C) -> (B,T,C)
  Tensor backward_body(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

 private:
  struct Saved {
    Tensor h;  // (N, 2F or F): fc1 output, the activation's input
  };
  MlpOptions opt_;
  std::unique_ptr<Norm> norm_;
  std::unique_ptr<Linear> fc1_, fc2_;
};

}  // namespace hytra
