#include "nn/norm.h"

#include "ops/ops.h"

namespace hytra {

Norm::Norm(const NormOptions& opt, const std::string& prefix, ParamStore& store, const std::string& stem) : opt_(opt) {
  w_ = &store.create(prefix + stem + "weight", {opt.dim}, InitKind::Ones, 0.0, true);
  if (opt.kind == NormKind::LayerNorm) b_ = &store.create(prefix + stem + "bias", {opt.dim}, InitKind::Zeros, 0.0, true);
}

Tensor Norm::forward(StepContext& ctx, const Tensor& x) {
  Exec& ex = ctx.ex();
  const int64_t C = opt_.dim, N = x.numel() / C;
  Saved& s = ctx.saved<Saved>(this);
  s.x = x.view({N, C});
  s.rstd = Tensor::empty({N}, stat_dtype(x.dtype()), x.device());
  Tensor y = Tensor::empty({N, C}, x.dtype(), x.device());
  if (opt_.kind == NormKind::RMSNorm) {
    ops::rmsnorm_fwd(ex, y, s.rstd, s.x, w_->value, opt_.eps);
  } else {
    s.mean = Tensor::empty({N}, stat_dtype(x.dtype()), x.device());
    ops::layernorm_fwd(ex, y, s.mean, s.rstd, s.x, w_->value, b_->value, opt_.eps);
  }
  return y.view(x.shape());
}

Tensor Norm::recompute_output(StepContext& ctx) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  Tensor y = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
  Tensor rstd = Tensor::empty(s.rstd.shape(), s.rstd.dtype(), s.rstd.device());
  if (opt_.kind == NormKind::RMSNorm) {
    ops::rmsnorm_fwd(ex, y, rstd, s.x, w_->value, opt_.eps);
  } else {
    Tensor mean = Tensor::empty(s.rstd.shape(), s.rstd.dtype(), s.rstd.device());
    ops::layernorm_fwd(ex, y, mean, rstd, s.x, w_->value, b_->value, opt_.eps);
  }
  return y;
}

Tensor Norm::backward(StepContext& ctx, const Tensor& dy) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  Tensor dx = Tensor::empty(s.x.shape(), dy.dtype(), dy.device());
  Tensor dy2 = dy.view(s.x.shape());
  if (opt_.kind == NormKind::RMSNorm)
    ops::rmsnorm_bwd(ex, dx, w_->grad, dy2, s.x, w_->value, s.rstd);
  else
    ops::layernorm_bwd(ex, dx, w_->grad, b_->grad, dy2, s.x, w_->value, s.mean, s.rstd);
  return dx.view(dy.shape());
}

Tensor Norm::forward_add(StepContext& ctx, const Tensor& a, const Tensor& b, Tensor& sum) {
  sum = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (opt_.kind != NormKind::RMSNorm) {
    ops::add(ctx.ex(), sum, a, b);
    return forward(ctx, sum);
  }
  const int64_t C = opt_.dim, N = a.numel() / C;
  Saved& s = ctx.saved<Saved>(this);
  s.x = sum.view({N, C});
  s.rstd = Tensor::empty({N}, stat_dtype(a.dtype()), a.device());
  Tensor y = Tensor::empty({N, C}, a.dtype(), a.device());
  ops::add_rmsnorm_fwd(ctx.ex(), s.x, y, s.rstd, a.view({N, C}), b.view({N, C}), w_->value, opt_.eps);
  return y.view(a.shape());
}

Tensor Norm::backward_add(StepContext& ctx, const Tensor& dy, const Tensor& dres) {
  if (opt_.kind != NormKind::RMSNorm) {
    Tensor dx = backward(ctx, dy);
    ops::axpy(ctx.ex(), dx, dres, 1.0);
    return dx;
  }
  Saved& s = ctx.saved<Saved>(this);
  Tensor dx = Tensor::empty(s.x.shape(), dy.dtype(), dy.device());
  ops::rmsnorm_bwd_add(ctx.ex(), dx, w_->grad, dy.view(s.x.shape()), s.x, w_->value, s.rstd, dres.view(s.x.shape()));
  return dx.view(dy.shape());
}

}  // namespace hytra
