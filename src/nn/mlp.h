// Dense feed-forward blocks.
// FeedForward: f(y) = linear_fc2(act(linear_fc1(y))), keys `<prefix>linear_fc1.weight` — (2F, C) for
// GLU activations with rows 0..F-1 the gate (activated) half and F..2F-1 the linear half, (F, C)
// otherwise — and `<prefix>linear_fc2.weight` (C, F), biases with add_bias_linear. GLU activations
// add --glu-linear-offset to the linear half (SwiGLU with a non-zero offset and QuickGeGLU run the
// expert activation op with probability 1).
// MLP (`-`): f(x) = FeedForward(norm(x)) under the layer prefix (docs/spec/names.md §1):
// mlp.linear_fc1.layer_norm_weight (fused pre-norm), mlp.linear_fc1.weight, mlp.linear_fc2.weight.
#pragma once
#include <memory>
#include <string>

#include "nn/linear.h"
#include "nn/module.h"
#include "nn/activation.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"

namespace hytra {

struct MlpOptions : PreNormOptions {
  int64_t hidden = 0, ffn = 0;  // C, F
  Activation activation = Activation::GeLU;
  double glu_linear_offset = 0.0;  // GLU: added to the linear half (--glu-linear-offset)
  bool bias = false;
};

class FeedForward : public Module {
 public:
  FeedForward(const MlpOptions& opt, const std::string& prefix, ParamStore& store);

  Tensor forward(StepContext& ctx, const Tensor& y) override;  // (B,T,C) -> (B,T,C)
  Tensor backward(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

 private:
  struct Saved {
    Tensor h;  // (N, 2F or F): fc1 output, the activation's input
  };
  bool offset_glu() const;  // the activation needs the offset-aware expert op
  MlpOptions opt_;
  std::unique_ptr<Linear> fc1_, fc2_;
};

class Mlp : public PreNormModule {
 public:
  Mlp(const MlpOptions& opt, const std::string& prefix, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override { return ff_->forward(ctx, y); }
  Tensor backward_body(StepContext& ctx, const Tensor& df) override { return ff_->backward(ctx, df); }
  void backward_dw(StepContext& ctx) override { ff_->backward_dw(ctx); }

 private:
  std::unique_ptr<Norm> norm_;
  std::unique_ptr<FeedForward> ff_;
};

}  // namespace hytra
