#include "nn/gated_delta_net.h"

#include <cmath>

#include "core/error.h"
#include "nn/channel_conv.h"
#include "nn/decode_cache.h"
#include "ops/ops.h"

namespace hytra {

GatedDeltaNet::GatedDeltaNet(const GatedDeltaNetOptions& whole, const std::string& prefix, ParamStore& store)
    : opt_(whole) {
  // Options from a validated configuration (ModelConfig::validate) satisfy these.
  HYTRA_ASSERT(whole.hidden > 0 && whole.key_heads > 0 && whole.value_heads > 0 && whole.key_head_dim > 0 &&
                   whole.value_head_dim > 0 && whole.conv_kernel > 0 && whole.key_heads % whole.tp.size == 0,
               prefix);
  HYTRA_ASSERT(whole.value_heads % whole.key_heads == 0, prefix);
  // Tensor parallelism: this rank's key heads with their value heads; every per-channel tensor split alike.
  opt_.key_heads = whole.tp.local(whole.key_heads);
  opt_.value_heads = whole.tp.local(whole.value_heads);
  const GatedDeltaNetOptions& o = opt_;
  const std::string p = prefix + "self_attention.";
  const int64_t Hv = o.value_heads, K = o.conv_kernel;
  norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.hidden, o.norm_eps}, p + "in_proj.", store, "layer_norm_");
  norm_->sequence_parallel_grads(o.tp);
  in_proj_ = std::make_unique<Linear>(
      p + "in_proj.", o.hidden, proj_dim(), o.bias, o.init_std, store,
      LinearSplit{LinearSplit::Column, o.tp, {qk_dim(), qk_dim(), v_dim(), v_dim(), Hv, Hv}});  // q k v z beta alpha
  const double conv_bound = 1.0 / std::sqrt(double(K));  // nn.Conv1d's default init for fan-in K
  conv_w_ = &store.create(p + "conv1d.weight", {conv_dim(), 1, K}, InitKind::Uniform, 0.0, false);
  conv_b_ = &store.create(p + "conv1d.bias", {conv_dim()}, InitKind::Uniform, 0.0, true);
  for (Param* c : {conv_w_, conv_b_}) {
    c->init_lo = -conv_bound;
    c->init_hi = conv_bound;
    shard_param(*c, o.tp, 0, {qk_dim(), qk_dim(), v_dim()});
  }
  a_log_ = &store.create(p + "A_log", {Hv}, InitKind::LogUniform, 0.0, true);
  a_log_->master_in_forward = true;
  a_log_->init_lo = 1.0;
  a_log_->init_hi = 16.0;
  dt_bias_ = &store.create(p + "dt_bias", {Hv}, InitKind::Ones, 0.0, true);
  dt_bias_->master_in_forward = true;
  for (Param* h : {a_log_, dt_bias_}) shard_param(*h, o.tp, 0, {Hv});
  out_norm_w_ = &store.create(p + "out_norm.weight", {o.value_head_dim}, InitKind::Ones, 0.0, true);
  partial_grad_param(*out_norm_w_, o.tp);  // one weight over every value head, the heads split over the ranks
  out_proj_ = std::make_unique<Linear>(p + "out_proj.", v_dim(), o.hidden, o.bias, o.output_init_std, store,
                                       LinearSplit{LinearSplit::Row, o.tp, {}});
}

Tensor GatedDeltaNet::forward_body(StepContext& ctx, const Tensor& in) {
  Exec& ex = ctx.ex();
  HYTRA_CHECK(in.dim() == 3 && in.size(2) == opt_.hidden, "self_attention: input must be (B,T,", opt_.hidden, "), got ",
              in.desc());
  if (ctx.decode != nullptr) return decode_body(ctx, in);
  const DType dt = in.dtype();
  const Device dev = in.device();
  Saved& s = ctx.saved<Saved>(this);
  s.proj = in_proj_->forward(ctx, in);  // (B,T,proj_dim): [q k v | z | beta | alpha], the whole sequence
  const int64_t B = s.proj.size(0), T = s.proj.size(1), Hk = opt_.key_heads, Hv = opt_.value_heads,
                dk = opt_.key_head_dim, dv = opt_.value_head_dim, V = v_dim();
  s.beta = Tensor::empty({B, T, Hv}, dt, dev);
  s.alpha = Tensor::empty({B, T, Hv}, dt, dev);
  ops::slice_copy(ex, s.beta, s.proj, 2, conv_dim() + V);
  ops::slice_copy(ex, s.alpha, s.proj, 2, conv_dim() + V + Hv);

  // conv + SiLU straight into q, k and v (nn/channel_conv.h).
  s.q = Tensor::empty({B, T, Hk, dk}, dt, dev);
  s.k = Tensor::empty({B, T, Hk, dk}, dt, dev);
  s.v = Tensor::empty({B, T, Hv, dv}, dt, dev);
  channel_conv_fwd(ex, {&s.q, &s.k, &s.v}, conv_input(s.proj), conv_w_->value.view({conv_dim(), opt_.conv_kernel}),
                   conv_b_->value);

  Tensor o = Tensor::empty({B, T, Hv, dv}, dt, dev);
  ops::gated_delta_rule_fwd(ex, o, s.q, s.k, s.v, s.alpha, s.beta, a_log_->master, dt_bias_->master, opt_.chunk_size);
  s.o = o.view({B * T, V});
  s.rstd = Tensor::empty({B * T, Hv}, stat_dtype(dt), dev);
  Tensor gated = Tensor::empty({B, T, V}, dt, dev);
  Tensor gated2 = gated.view({B * T, V});
  ops::gated_rmsnorm_fwd(ex, gated2, s.rstd, s.o, gate(s.proj), out_norm_w_->value, dv, opt_.norm_eps, true);
  return out_proj_->forward(ctx, gated);
}

Tensor GatedDeltaNet::decode_body(StepContext& ctx, const Tensor& in) {
  HYTRA_CHECK(in.size(1) == 1 && !opt_.tp.on(),
              "self_attention: decoding takes one token per sequence on one rank, got ", in.desc());
  Exec& ex = ctx.ex();
  const DType dt = in.dtype();
  const Device dev = in.device();
  const Tensor proj = in_proj_->forward(ctx, in);  // (B,1,proj_dim): [q k v | z | beta | alpha]
  const int64_t B = in.size(0), Hk = opt_.key_heads, Hv = opt_.value_heads, dk = opt_.key_head_dim,
                dv = opt_.value_head_dim, K = opt_.conv_kernel, V = v_dim();
  Cache& c = ctx.decode->state<Cache>(this);
  if (!c.conv.defined()) {
    c.conv = Tensor::empty({B, K - 1, conv_dim()}, dt, dev);
    c.S = Tensor::empty({B, Hv, dv, dk}, stat_dtype(dt), dev);
    ops::fill(ex, c.conv, 0.0);
    ops::fill(ex, c.S, 0.0);
  }
  Tensor beta = Tensor::empty({B, 1, Hv}, dt, dev), alpha = Tensor::empty({B, 1, Hv}, dt, dev);
  ops::slice_copy(ex, beta, proj, 2, conv_dim() + V);
  ops::slice_copy(ex, alpha, proj, 2, conv_dim() + V + Hv);
  Tensor q = Tensor::empty({B, Hk, dk}, dt, dev), k = Tensor::empty({B, Hk, dk}, dt, dev);
  Tensor v = Tensor::empty({B, Hv, dv}, dt, dev);
  channel_conv_step(ex, {&q, &k, &v}, c.conv, proj, 0, conv_w_->value.view({conv_dim(), K}), conv_b_->value);
  Tensor o = Tensor::empty({B, Hv, dv}, dt, dev);
  ops::gdn_step(ex, o, c.S, q, k, v, alpha.view({B, Hv}), beta.view({B, Hv}), a_log_->master, dt_bias_->master);
  Tensor rstd = Tensor::empty({B, Hv}, stat_dtype(dt), dev);
  Tensor gated = Tensor::empty({B, 1, V}, dt, dev);
  Tensor gated2 = gated.view({B, V});
  ops::gated_rmsnorm_fwd(ex, gated2, rstd, o.view({B, V}), gate(proj), out_norm_w_->value, dv, opt_.norm_eps, true);
  return out_proj_->forward(ctx, gated);
}

Tensor GatedDeltaNet::backward_body(StepContext& ctx, const Tensor& df) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t B = s.proj.size(0), T = s.proj.size(1), Hv = opt_.value_heads, V = v_dim();
  const DType dt = df.dtype();
  const Device dev = df.device();
  Tensor dgated = out_proj_->backward(ctx, df).view({B * T, V});
  Tensor dproj = Tensor::empty(s.proj.shape(), dt, dev);  // each part written in place below
  Tensor dout = Tensor::empty({B * T, V}, dt, dev), dz = gate(dproj);
  ops::gated_rmsnorm_bwd(ex, dout, dz, out_norm_w_->grad, dgated, s.o, gate(s.proj), out_norm_w_->value, s.rstd,
                         opt_.value_head_dim, true);

  Tensor dq = Tensor::empty(s.q.shape(), dt, dev), dk = Tensor::empty(s.k.shape(), dt, dev);
  Tensor dv = Tensor::empty(s.v.shape(), dt, dev);
  Tensor dalpha = Tensor::empty(s.alpha.shape(), dt, dev), dbeta = Tensor::empty(s.beta.shape(), dt, dev);
  ops::gated_delta_rule_bwd(ex, dq, dk, dv, dalpha, dbeta, a_log_->grad, dt_bias_->grad, dout.view(s.v.shape()), s.q,
                            s.k, s.v, s.alpha, s.beta, a_log_->master, dt_bias_->master, opt_.chunk_size);

  // The conv backward reads d(q, k, v) where the rule wrote them.
  Tensor dw = conv_w_->grad.view({conv_dim(), opt_.conv_kernel});
  channel_conv_bwd(ex, conv_input(dproj), dw, conv_b_->grad, {&dq, &dk, &dv}, conv_input(s.proj),
                   conv_w_->value.view(dw.shape()), conv_b_->value);
  ops::slice_scatter(ex, dproj, dbeta, 2, conv_dim() + V);
  ops::slice_scatter(ex, dproj, dalpha, 2, conv_dim() + V + Hv);
  s = Saved{};
  return in_proj_->backward(ctx, dproj);
}

void GatedDeltaNet::backward_dw(StepContext& ctx) {
  out_proj_->backward_dw(ctx);
  in_proj_->backward_dw(ctx);
}

}  // namespace hytra
