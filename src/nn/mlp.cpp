#include "nn/mlp.h"

#include "ops/ops.h"

namespace hytra {

Mlp::Mlp(const MlpOptions& o, const std::string& prefix, ParamStore& store) : opt_(o) {
  const std::string p = prefix + "mlp.";
  const int64_t fc1_out = o.activation == Activation::SwiGLU ? 2 * o.ffn : o.ffn;
  norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.hidden, o.norm_eps}, p + "linear_fc1.", store, "layer_norm_");
  fc1_ = std::make_unique<Linear>(p + "linear_fc1.", o.hidden, fc1_out, o.bias, o.init_std, store);
  fc2_ = std::make_unique<Linear>(p + "linear_fc2.", o.ffn, o.hidden, o.bias, o.output_init_std, store);
}

Tensor Mlp::forward_body(StepContext& ctx, const Tensor& x) {
  Exec& ex = ctx.ex();
  const int64_t N = x.numel() / opt_.hidden;
  Tensor h = fc1_->forward(ctx, x);
  h = h.view({N, h.size(-1)});
  ctx.saved<Saved>(this).h = h;
  Tensor a = Tensor::empty({N, opt_.ffn}, x.dtype(), x.device());  // (N, F)
  switch (opt_.activation) {
    case Activation::SwiGLU: ops::swiglu_fwd(ex, a, h); break;
    case Activation::GeLU: ops::gelu_fwd(ex, a, h); break;
    case Activation::SquaredReLU: ops::sqrelu_fwd(ex, a, h); break;
  }
  return fc2_->forward(ctx, a.view({x.size(0), x.size(1), opt_.ffn}));
}

Tensor Mlp::backward_body(StepContext& ctx, const Tensor& dy) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  Tensor da = fc2_->backward(ctx, dy);
  da = da.view({s.h.size(0), opt_.ffn});
  Tensor dh = Tensor::empty(s.h.shape(), dy.dtype(), dy.device());
  switch (opt_.activation) {
    case Activation::SwiGLU: ops::swiglu_bwd(ex, dh, da, s.h); break;
    case Activation::GeLU: ops::gelu_bwd(ex, dh, da, s.h); break;
    case Activation::SquaredReLU: ops::sqrelu_bwd(ex, dh, da, s.h); break;
  }
  Shape hs = dy.shape();
  hs.back() = s.h.size(1);
  return fc1_->backward(ctx, dh.view(hs));
}

void Mlp::backward_dw(StepContext& ctx) {
  fc2_->backward_dw(ctx);
  fc1_->backward_dw(ctx);
}

}  // namespace hytra
