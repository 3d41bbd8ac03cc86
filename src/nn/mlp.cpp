#include "nn/mlp.h"

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

FeedForward::FeedForward(const MlpOptions& whole, const std::string& prefix, ParamStore& store) : opt_(whole) {
  opt_.ffn = whole.tp.local(whole.ffn);  // tensor parallelism: this rank's channels (of each GLU half)
  const MlpOptions& o = opt_;
  const bool glu = is_glu(o.activation);
  fc1_ = std::make_unique<Linear>(
      prefix + "linear_fc1.", o.hidden, glu ? 2 * o.ffn : o.ffn, o.bias, o.init_std, store,
      LinearSplit{LinearSplit::Column, o.tp, glu ? std::vector<int64_t>{o.ffn, o.ffn} : std::vector<int64_t>{}});
  fc2_ = std::make_unique<Linear>(prefix + "linear_fc2.", o.ffn, o.hidden, o.bias, o.output_init_std, store,
                                  LinearSplit{LinearSplit::Row, o.tp, {}});
}

namespace {
// GLU activations with a linear offset run the expert activation op with probability 1 per row.
Tensor ones_probs(Exec& ex, int64_t n, const Tensor& like) {
  Tensor p = Tensor::empty({n}, stat_dtype(like.dtype()), like.device());
  ops::fill(ex, p, 1.0);
  return p;
}
ops::ExpertActivation as_expert(Activation a) {
  return a == Activation::SwiGLU ? ops::ExpertActivation::SwiGLU : ops::ExpertActivation::QuickGeGLU;
}
}  // namespace

bool FeedForward::offset_glu() const {
  return opt_.activation == Activation::QuickGeGLU || (opt_.activation == Activation::SwiGLU && opt_.glu_linear_offset != 0);
}

Tensor FeedForward::forward(StepContext& ctx, const Tensor& x) {
  Exec& ex = ctx.ex();
  Tensor h = fc1_->forward(ctx, x);  // the whole sequence (sequence parallelism: gathered)
  Shape shape = h.shape();
  shape.back() = opt_.ffn;
  const int64_t N = h.numel() / h.size(-1);
  h = h.view({N, h.size(-1)});
  ctx.saved<Saved>(this).h = h;
  Tensor a = Tensor::empty({N, opt_.ffn}, x.dtype(), x.device());  // (N, F)
  if (offset_glu()) {
    ops::moe_act_fwd(ex, a, h, ones_probs(ex, N, h), as_expert(opt_.activation), 0, opt_.glu_linear_offset, 0.0);
  } else {
    switch (opt_.activation) {
      case Activation::SwiGLU: ops::swiglu_fwd(ex, a, h); break;
      case Activation::GeLU: ops::gelu_fwd(ex, a, h); break;
      case Activation::SquaredReLU: ops::sqrelu_fwd(ex, a, h); break;
      case Activation::QuickGeGLU: break;  // offset_glu()
    }
  }
  return fc2_->forward(ctx, a.view(shape));
}

Tensor FeedForward::backward(StepContext& ctx, const Tensor& dy) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  Tensor da = fc2_->backward(ctx, dy);  // the whole sequence's (sequence parallelism: dy gathered)
  Shape hs = da.shape();
  hs.back() = s.h.size(1);
  da = da.view({s.h.size(0), opt_.ffn});
  Tensor dh = Tensor::empty(s.h.shape(), dy.dtype(), dy.device());
  if (offset_glu()) {
    const int64_t N = s.h.size(0);
    Tensor dprobs = Tensor::empty({N}, stat_dtype(s.h.dtype()), s.h.device());  // (N) unused
    ops::moe_act_bwd(ex, dh, dprobs, da, s.h, ones_probs(ex, N, s.h), as_expert(opt_.activation), 0,
                     opt_.glu_linear_offset, 0.0);
  } else {
    switch (opt_.activation) {
      case Activation::SwiGLU: ops::swiglu_bwd(ex, dh, da, s.h); break;
      case Activation::GeLU: ops::gelu_bwd(ex, dh, da, s.h); break;
      case Activation::SquaredReLU: ops::sqrelu_bwd(ex, dh, da, s.h); break;
      case Activation::QuickGeGLU: break;  // offset_glu()
    }
  }
  return fc1_->backward(ctx, dh.view(hs));
}

void FeedForward::backward_dw(StepContext& ctx) {
  fc2_->backward_dw(ctx);
  fc1_->backward_dw(ctx);
}

Mlp::Mlp(const MlpOptions& o, const std::string& prefix, ParamStore& store) {
  const std::string p = prefix + "mlp.";
  norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.hidden, o.norm_eps}, p + "linear_fc1.", store, "layer_norm_");
  norm_->sequence_parallel_grads(o.tp);
  ff_ = std::make_unique<FeedForward>(o, p, store);
}

}  // namespace hytra
