#include "nn/mamba2.h"

#include <cmath>

#include "core/error.h"
#include "nn/channel_conv.h"
#include "nn/decode_cache.h"
#include "ops/ops.h"

namespace hytra {

Mamba2Mixer::Mamba2Mixer(const Mamba2Options& whole, const std::string& prefix, ParamStore& store) : opt_(whole) {
  // Options from a validated configuration (ModelConfig::validate) satisfy these.
  HYTRA_ASSERT(whole.hidden > 0 && whole.num_heads > 0 && whole.head_dim > 0 && whole.state_dim > 0 &&
                   whole.num_groups > 0 && whole.num_groups % whole.tp.size == 0,
               prefix);
  HYTRA_ASSERT(whole.num_heads % whole.num_groups == 0, prefix);
  // Tensor parallelism (Megatron's MambaMixer): this rank's heads and groups; every per-channel tensor split alike.
  opt_.num_heads = whole.tp.local(whole.num_heads);
  opt_.num_groups = whole.tp.local(whole.num_groups);
  const Mamba2Options& o = opt_;
  const int64_t GN = o.num_groups * o.state_dim;
  const std::string p = prefix + "mixer.";
  const int64_t H = o.num_heads, K = o.conv_kernel;
  norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.hidden, o.norm_eps}, p + "in_proj.", store, "layer_norm_");
  norm_->sequence_parallel_grads(o.tp);
  in_proj_ = std::make_unique<Linear>(p + "in_proj.", o.hidden, 2 * d_inner() + 2 * GN + H, false, o.init_std, store,
                                      LinearSplit{LinearSplit::Column, o.tp, {d_inner(), d_inner(), GN, GN, H}});
  const double conv_bound = 1.0 / std::sqrt(double(K));  // kaiming-uniform(a=sqrt 5) bound for fan-in K
  conv_w_ = &store.create(p + "conv1d.weight", {conv_dim(), 1, K}, InitKind::Uniform, 0.0, false);
  conv_b_ = &store.create(p + "conv1d.bias", {conv_dim()}, InitKind::Uniform, 0.0, true);
  for (Param* c : {conv_w_, conv_b_}) {
    c->init_lo = -conv_bound;
    c->init_hi = conv_bound;
    shard_param(*c, o.tp, 0, {d_inner(), GN, GN});  // the x, B and C channels
  }
  a_log_ = &store.create(p + "A_log", {H}, InitKind::LogUniform, 0.0, true);
  a_log_->master_in_forward = true;
  a_log_->init_lo = 1.0;
  a_log_->init_hi = 16.0;
  d_ = &store.create(p + "D", {H}, InitKind::Ones, 0.0, true);
  d_->master_in_forward = true;
  dt_bias_ = &store.create(p + "dt_bias", {H}, InitKind::MambaDtBias, 0.0, true);
  dt_bias_->master_in_forward = true;
  dt_bias_->init_lo = 1e-3;  // dt_min
  dt_bias_->init_hi = 0.1;   // dt_max
  norm_w_ = &store.create(p + "norm.weight", {d_inner()}, InitKind::Ones, 0.0, true);
  for (Param* h : {a_log_, d_, dt_bias_, norm_w_}) shard_param(*h, o.tp, 0, {h->shape[0]});
  out_proj_ = std::make_unique<Linear>(p + "out_proj.", d_inner(), o.hidden, false, o.output_init_std, store,
                                       LinearSplit{LinearSplit::Row, o.tp, {}});
}

Tensor Mamba2Mixer::forward_body(StepContext& ctx, const Tensor& in) {
  Exec& ex = ctx.ex();
  HYTRA_CHECK(in.dim() == 3 && in.size(2) == opt_.hidden, "mixer: input must be (B,T,", opt_.hidden, "), got ",
              in.desc());
  if (ctx.decode != nullptr) return decode_body(ctx, in);
  const DType dt = in.dtype();
  const Device dev = in.device();
  Saved& s = ctx.saved<Saved>(this);
  // (B,T,2 Di + 2GN + H), the whole sequence (sequence parallelism: gathered); the conv and the norm read it in place
  s.zxbcdt = in_proj_->forward(ctx, in);
  const int64_t B = s.zxbcdt.size(0), T = s.zxbcdt.size(1), H = opt_.num_heads, P = opt_.head_dim, G = opt_.num_groups,
                N = opt_.state_dim, Di = d_inner();

  // conv + SiLU straight into x, B and C (nn/channel_conv.h).
  s.x = Tensor::empty({B, T, H, P}, dt, dev);
  s.b = Tensor::empty({B, T, G, N}, dt, dev);
  s.c = Tensor::empty({B, T, G, N}, dt, dev);
  channel_conv_fwd(ex, {&s.x, &s.b, &s.c}, conv_input(s.zxbcdt), conv_w_->value.view({conv_dim(), opt_.conv_kernel}),
                   conv_b_->value);

  Tensor y = Tensor::empty({B, T, H, P}, dt, dev);
  ops::ssd_chunk_scan_fwd(ex, y, s.x, dt_part(s.zxbcdt), s.b, s.c, dt_bias_->master, a_log_->master, d_->master,
                          opt_.chunk_size, ctx.grad_enabled ? &s.ssd_kept : nullptr);
  s.y = y.view({B * T, Di});
  s.rstd = Tensor::empty({B * T, G}, stat_dtype(dt), dev);
  Tensor gated = Tensor::empty({B, T, Di}, dt, dev);
  Tensor gated2 = gated.view({B * T, Di});
  ops::gated_rmsnorm_fwd(ex, gated2, s.rstd, s.y, gate(s.zxbcdt), norm_w_->value, Di / G, 1e-5, false);
  return out_proj_->forward(ctx, gated);
}

Tensor Mamba2Mixer::decode_body(StepContext& ctx, const Tensor& in) {
  HYTRA_CHECK(in.size(1) == 1 && !opt_.tp.on(), "mixer: decoding takes one token per sequence on one rank, got ",
              in.desc());
  Exec& ex = ctx.ex();
  const DType dt = in.dtype();
  const Device dev = in.device();
  const Tensor zxbcdt = in_proj_->forward(ctx, in);  // (B,1,2 Di + 2GN + H)
  const int64_t B = in.size(0), H = opt_.num_heads, P = opt_.head_dim, G = opt_.num_groups, N = opt_.state_dim,
                K = opt_.conv_kernel, Di = d_inner();
  Cache& c = ctx.decode->state<Cache>(this);
  if (!c.conv.defined()) {
    c.conv = Tensor::empty({B, K - 1, conv_dim()}, dt, dev);
    c.ssm = Tensor::empty({B, H, P, N}, stat_dtype(dt), dev);
    ops::fill(ex, c.conv, 0.0);
    ops::fill(ex, c.ssm, 0.0);
  }
  Tensor x = Tensor::empty({B, H, P}, dt, dev), b = Tensor::empty({B, G, N}, dt, dev);
  Tensor cm = Tensor::empty({B, G, N}, dt, dev), dt_raw = Tensor::empty({B, 1, H}, dt, dev);
  channel_conv_step(ex, {&x, &b, &cm}, c.conv, zxbcdt, Di, conv_w_->value.view({conv_dim(), K}), conv_b_->value);
  ops::slice_copy(ex, dt_raw, zxbcdt, 2, Di + conv_dim());
  Tensor y = Tensor::empty({B, H, P}, dt, dev);
  ops::ssd_step(ex, y, c.ssm, x, dt_raw.view({B, H}), b, cm, dt_bias_->master, a_log_->master, d_->master);
  Tensor rstd = Tensor::empty({B, G}, stat_dtype(dt), dev);
  Tensor gated = Tensor::empty({B, 1, Di}, dt, dev);
  Tensor gated2 = gated.view({B, Di});
  ops::gated_rmsnorm_fwd(ex, gated2, rstd, y.view({B, Di}), gate(zxbcdt), norm_w_->value, Di / G, 1e-5, false);
  return out_proj_->forward(ctx, gated);
}

Tensor Mamba2Mixer::backward_body(StepContext& ctx, const Tensor& df) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t B = s.zxbcdt.size(0), T = s.zxbcdt.size(1), G = opt_.num_groups, Di = d_inner();
  const DType dt = df.dtype();
  const Device dev = df.device();
  Tensor dgated = out_proj_->backward(ctx, df).view({B * T, Di});
  Tensor dzxbcdt = Tensor::empty(s.zxbcdt.shape(), dt, dev);  // each part written in place below
  Tensor dy = Tensor::empty({B * T, Di}, dt, dev), dz = gate(dzxbcdt);
  ops::gated_rmsnorm_bwd(ex, dy, dz, norm_w_->grad, dgated, s.y, gate(s.zxbcdt), norm_w_->value, s.rstd, Di / G, false);

  Tensor dx = Tensor::empty(s.x.shape(), dt, dev), ddt = dt_part(dzxbcdt);
  Tensor dB = Tensor::empty(s.b.shape(), dt, dev), dC = Tensor::empty(s.c.shape(), dt, dev);
  ops::ssd_chunk_scan_bwd(ex, dx, ddt, dB, dC, dt_bias_->grad, a_log_->grad, d_->grad, dy.view(s.x.shape()), s.x,
                          dt_part(s.zxbcdt), s.b, s.c, dt_bias_->master, a_log_->master, d_->master, opt_.chunk_size,
                          &s.ssd_kept);

  // The conv backward reads d(x, B, C) where the scan wrote them.
  Tensor dw = conv_w_->grad.view({conv_dim(), opt_.conv_kernel});
  channel_conv_bwd(ex, conv_input(dzxbcdt), dw, conv_b_->grad, {&dx, &dB, &dC}, conv_input(s.zxbcdt),
                   conv_w_->value.view(dw.shape()), conv_b_->value);
  s = Saved{};
  return in_proj_->backward(ctx, dzxbcdt);
}

void Mamba2Mixer::backward_dw(StepContext& ctx) {
  out_proj_->backward_dw(ctx);
  in_proj_->backward_dw(ctx);
}

}  // namespace hytra
