#include "nn/attention.h"

#include <cmath>

#include "core/error.h"
#include "nn/decode_cache.h"
#include "ops/ops.h"

namespace hytra {

SelfAttention::SelfAttention(const AttentionOptions& whole, const std::string& prefix, ParamStore& store)
    : opt_(whole) {
  // Options from a validated configuration (ModelConfig::validate) satisfy these.
  HYTRA_ASSERT(whole.hidden > 0 && whole.num_heads > 0 && whole.num_kv_heads > 0 && whole.head_dim > 0, prefix);
  HYTRA_ASSERT(whole.num_heads % whole.num_kv_heads == 0 && whole.num_kv_heads % whole.tp.size == 0, prefix);
  // Tensor parallelism: this rank's KV groups, each with its query heads (the QKV rows are grouped per KV group).
  opt_.num_heads = whole.tp.local(whole.num_heads);
  opt_.num_kv_heads = whole.tp.local(whole.num_kv_heads);
  const AttentionOptions& o = opt_;
  HYTRA_ASSERT(!o.use_rope || (rotary_dim() > 0 && rotary_dim() % 2 == 0), prefix);
  const std::string p = prefix + "self_attention.";
  norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.hidden, o.norm_eps}, p + "linear_qkv.", store, "layer_norm_");
  norm_->sequence_parallel_grads(o.tp);
  qkv_ = std::make_unique<Linear>(p + "linear_qkv.", o.hidden, (o.num_heads + 2 * o.num_kv_heads) * o.head_dim, o.bias,
                                  o.init_std, store, LinearSplit{LinearSplit::Column, o.tp, {}});
  if (o.qk_norm) {
    q_norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.head_dim, o.norm_eps}, p + "q_layernorm.", store);
    k_norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.head_dim, o.norm_eps}, p + "k_layernorm.", store);
    q_norm_->partial_grads(o.tp);
    k_norm_->partial_grads(o.tp);
  }
  proj_ = std::make_unique<Linear>(p + "linear_proj.", o.num_heads * o.head_dim, o.hidden, o.bias, o.output_init_std,
                                   store, LinearSplit{LinearSplit::Row, o.tp, {}});
}

int64_t SelfAttention::rotary_dim() const { return int64_t(double(opt_.head_dim) * opt_.rotary_percent); }

void SelfAttention::split_qkv(StepContext& ctx, const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) {
  Exec& ex = ctx.ex();
  const int64_t B = qkv.size(0), T = qkv.size(1), H = opt_.num_heads, G = opt_.num_kv_heads, D = opt_.head_dim;
  const int64_t R = H / G;  // query heads per KV group
  // Per KV group the rows are [R query heads; k; v]: slicing dim 1 gives q in (B,T,G*R = H,D) order.
  Tensor grouped = qkv.view({B * T * G, R + 2, D});
  Tensor qg = q.view({B * T * G, R, D}), kg = k.view({B * T * G, 1, D}), vg = v.view({B * T * G, 1, D});
  ops::slice_copy(ex, qg, grouped, 1, 0);
  ops::slice_copy(ex, kg, grouped, 1, R);
  ops::slice_copy(ex, vg, grouped, 1, R + 1);
  if (q_norm_) {
    q = q_norm_->forward(ctx, q);
    k = k_norm_->forward(ctx, k);
  }
}

Tensor SelfAttention::decode_body(StepContext& ctx, const Tensor& x) {
  HYTRA_CHECK(x.size(1) == 1 && !opt_.tp.on(),
              "self_attention: decoding takes one token per sequence on one rank, got ", x.desc());
  DecodeCache& cache = *ctx.decode;
  const Tensor qkv = qkv_->forward(ctx, x);
  const int64_t B = x.size(0), H = opt_.num_heads, G = opt_.num_kv_heads, D = opt_.head_dim;
  Tensor q = Tensor::empty({B, 1, H, D}, x.dtype(), x.device());
  Tensor k = Tensor::empty({B, 1, G, D}, x.dtype(), x.device());
  Tensor v = Tensor::empty({B, 1, G, D}, x.dtype(), x.device());
  split_qkv(ctx, qkv, q, k, v);
  Cache& c = cache.state<Cache>(this);
  if (!c.k.defined()) {
    c.k = Tensor::empty({B, cache.capacity(), G, D}, x.dtype(), x.device());
    c.v = Tensor::empty({B, cache.capacity(), G, D}, x.dtype(), x.device());
  }
  Tensor out = Tensor::empty({B, H, D}, x.dtype(), x.device());
  ops::attention_decode(ctx.ex(), out, c.k, c.v, q.view({B, H, D}), k.view({B, G, D}), v.view({B, G, D}),
                        cache.position(), 1.0 / std::sqrt(double(D)), opt_.use_rope ? rotary_dim() : 0,
                        opt_.rotary_base, opt_.rotary_interleaved);
  return proj_->forward(ctx, out.view({B, 1, H * D}));
}

Tensor SelfAttention::forward_body(StepContext& ctx, const Tensor& x) {
  Exec& ex = ctx.ex();
  HYTRA_CHECK(x.dim() == 3 && x.size(2) == opt_.hidden, "self_attention: input must be (B,T,", opt_.hidden, "), got ",
              x.desc());
  if (ctx.decode != nullptr) return decode_body(ctx, x);
  Tensor qkv = qkv_->forward(ctx, x);  // (B,T,G*(R+2)*D): the whole sequence (sequence parallelism: gathered)
  const int64_t B = qkv.size(0), T = qkv.size(1), H = opt_.num_heads, G = opt_.num_kv_heads, D = opt_.head_dim;
  Saved& s = ctx.saved<Saved>(this);
  s.q = Tensor::empty({B, T, H, D}, x.dtype(), x.device());
  s.k = Tensor::empty({B, T, G, D}, x.dtype(), x.device());
  s.v = Tensor::empty({B, T, G, D}, x.dtype(), x.device());
  if (fused_split_rope()) {
    ops::qkv_rope_fwd(ex, s.q, s.k, s.v, qkv, rotary_dim(), opt_.rotary_base, opt_.rotary_interleaved);
  } else {
    split_qkv(ctx, qkv, s.q, s.k, s.v);
    if (opt_.use_rope) {
      ops::rope_fwd(ex, s.q, s.q, rotary_dim(), opt_.rotary_base, opt_.rotary_interleaved);
      ops::rope_fwd(ex, s.k, s.k, rotary_dim(), opt_.rotary_base, opt_.rotary_interleaved);
    }
  }
  s.out = Tensor::empty({B, T, H, D}, x.dtype(), x.device());
  s.lse = Tensor::empty({B, H, T}, stat_dtype(x.dtype()), x.device());
  ops::attention_fwd(ex, s.out, s.lse, s.q, s.k, s.v, 1.0 / std::sqrt(double(D)));
  Tensor y = proj_->forward(ctx, s.out.view({B, T, H * D}));
  if (opt_.recompute_core) s.out = s.lse = Tensor();  // rebuilt from q, k, v in backward
  return y;
}

Tensor SelfAttention::backward_body(StepContext& ctx, const Tensor& dy) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t B = s.q.size(0), T = s.q.size(1), H = opt_.num_heads, G = opt_.num_kv_heads, D = opt_.head_dim;
  const int64_t R = H / G;
  Tensor dout = proj_->backward(ctx, dy).view({B, T, H, D});
  if (!s.lse.defined()) {  // selective recompute "core_attn": the same (deterministic) forward again
    s.out = Tensor::empty({B, T, H, D}, dy.dtype(), dy.device());
    s.lse = Tensor::empty({B, H, T}, stat_dtype(dy.dtype()), dy.device());
    ops::attention_fwd(ex, s.out, s.lse, s.q, s.k, s.v, 1.0 / std::sqrt(double(D)));
  }
  Tensor dq = Tensor::empty(s.q.shape(), dy.dtype(), dy.device());
  Tensor dk = Tensor::empty(s.k.shape(), dy.dtype(), dy.device());
  Tensor dv = Tensor::empty(s.v.shape(), dy.dtype(), dy.device());
  ops::attention_bwd(ex, dq, dk, dv, dout, s.q, s.k, s.v, s.out, s.lse, 1.0 / std::sqrt(double(D)));
  Tensor dqkv = Tensor::empty({B, T, (H + 2 * G) * D}, dy.dtype(), dy.device());
  if (fused_split_rope()) {
    ops::qkv_rope_bwd(ex, dqkv, dq, dk, dv, rotary_dim(), opt_.rotary_base, opt_.rotary_interleaved);
  } else {
    if (opt_.use_rope) {
      ops::rope_bwd(ex, dq, dq, rotary_dim(), opt_.rotary_base, opt_.rotary_interleaved);
      ops::rope_bwd(ex, dk, dk, rotary_dim(), opt_.rotary_base, opt_.rotary_interleaved);
    }
    if (q_norm_) {
      dq = q_norm_->backward(ctx, dq);
      dk = k_norm_->backward(ctx, dk);
    }
    Tensor grouped = dqkv.view({B * T * G, R + 2, D});
    ops::slice_scatter(ex, grouped, dq.view({B * T * G, R, D}), 1, 0);
    ops::slice_scatter(ex, grouped, dk.view({B * T * G, 1, D}), 1, R);
    ops::slice_scatter(ex, grouped, dv.view({B * T * G, 1, D}), 1, R + 1);
  }
  return qkv_->backward(ctx, dqkv.view({B, T, (H + 2 * G) * D}));
}

void SelfAttention::backward_dw(StepContext& ctx) {
  proj_->backward_dw(ctx);
  qkv_->backward_dw(ctx);
}

}  // namespace hytra
