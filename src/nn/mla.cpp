#include "nn/mla.h"

#include <cmath>

#include "core/error.h"
#include "nn/decode_cache.h"
#include "ops/ops.h"

namespace hytra {
namespace {

// Columns [start, start + width) of x (N, W) as a new (N, width) tensor.
Tensor columns(Exec& ex, const Tensor& x, int64_t start, int64_t width) {
  Tensor y = Tensor::empty({x.size(0), width}, x.dtype(), x.device());
  ops::slice_copy(ex, y, x, 1, start);
  return y;
}

}  // namespace

double yarn_mscale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

YarnRope yarn_rope(int64_t dr, double base, double original_positions, double factor, double mscale,
                   double mscale_all_dim) {
  YarnRope y;
  if (factor <= 1.0) return y;
  constexpr double kBetaFast = 32, kBetaSlow = 1, kPi = 3.14159265358979323846;
  // The pair whose wavelength makes r turns over the original context.
  auto pair = [&](double r) {
    return double(dr) * std::log(original_positions / (2 * kPi * r)) / (2 * std::log(base));
  };
  y.factor = factor;
  y.low = std::max(std::floor(pair(kBetaFast)), 0.0);
  y.high = std::min(std::ceil(pair(kBetaSlow)), double(dr - 1));
  if (y.high == y.low) y.high += 0.001;
  y.scale = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim);
  return y;
}

MultiLatentAttention::MultiLatentAttention(const MlaOptions& opt, const std::string& prefix, ParamStore& store)
    : opt_(opt) {
  // Options from a validated configuration (ModelConfig::validate) satisfy these.
  HYTRA_ASSERT(opt.hidden > 0 && opt.num_heads > 0 && opt.kv_lora_rank > 0 && opt.qk_head_dim > 0 &&
                   opt.qk_pos_emb_head_dim > 0 && opt.qk_pos_emb_head_dim % 2 == 0 && opt.v_head_dim > 0 &&
                   opt.v_head_dim <= dq() && !opt.tp.on(),
               prefix);
  const std::string p = prefix + "self_attention.";
  const int64_t h = opt.hidden, n = opt.num_heads, rq = opt.q_lora_rank, rkv = opt.kv_lora_rank;
  const int64_t dn = opt.qk_head_dim, dr = opt.qk_pos_emb_head_dim, dv = opt.v_head_dim;
  norm_ = std::make_unique<Norm>(NormOptions{opt.norm, h, opt.norm_eps}, prefix + "input_layernorm.", store);
  if (rq > 0) {
    q_down_ = std::make_unique<Linear>(p + "linear_q_down_proj.", h, rq, false, opt.init_std, store);
    if (opt.latent_norms)
      q_norm_ = std::make_unique<Norm>(NormOptions{opt.norm, rq, opt.norm_eps}, p + "linear_q_up_proj.", store,
                                       "layer_norm_");
    q_up_ = std::make_unique<Linear>(p + "linear_q_up_proj.", rq, n * dq(), false, opt.init_std, store);
  } else {
    q_up_ = std::make_unique<Linear>(p + "linear_q_proj.", h, n * dq(), false, opt.init_std, store);
  }
  kv_down_ = std::make_unique<Linear>(p + "linear_kv_down_proj.", h, rkv + dr, false, opt.init_std, store);
  if (opt.latent_norms)
    kv_norm_ = std::make_unique<Norm>(NormOptions{opt.norm, rkv, opt.norm_eps}, p + "linear_kv_up_proj.", store,
                                      "layer_norm_");
  kv_up_ = std::make_unique<Linear>(p + "linear_kv_up_proj.", rkv, n * (dn + dv), false, opt.init_std, store);
  proj_ = std::make_unique<Linear>(p + "linear_proj.", n * dv, h, opt.bias, opt.output_init_std, store);
}

double MultiLatentAttention::scale() const {
  return opt_.softmax_scale > 0 ? opt_.softmax_scale : 1.0 / std::sqrt(double(dq()));
}

Rotary MultiLatentAttention::rotary(int64_t first) const {
  Rotary r;
  r.base = opt_.rotary_base;
  r.interleaved = true;
  r.first_position = first;
  if (yarn()) {
    r.factor = opt_.yarn.factor;
    r.low = opt_.yarn.low;
    r.high = opt_.yarn.high;
    r.scale = opt_.yarn.scale;
  }
  return r;
}

MultiLatentAttention::Latents MultiLatentAttention::down(StepContext& ctx, const Tensor& x) {
  Exec& ex = ctx.ex();
  const int64_t B = x.size(0), T = x.size(1), rkv = opt_.kv_lora_rank, dr = opt_.qk_pos_emb_head_dim;
  Latents lat;
  lat.q_in = x;
  if (q_down_) {
    lat.q_in = q_down_->forward(ctx, x);
    if (q_norm_) lat.q_in = q_norm_->forward(ctx, lat.q_in);
  }
  const Tensor kv = kv_down_->forward(ctx, x);  // (B,T,rkv + dr): [kv_c, k_pe]
  lat.kv_c = Tensor::empty({B, T, rkv}, x.dtype(), x.device());
  lat.k_pe = Tensor::empty({B, T, dr}, x.dtype(), x.device());
  ops::slice_copy(ex, lat.kv_c, kv, 2, 0);
  ops::slice_copy(ex, lat.k_pe, kv, 2, rkv);
  if (kv_norm_) lat.kv_c = kv_norm_->forward(ctx, lat.kv_c);
  return lat;
}

void MultiLatentAttention::up(StepContext& ctx, const Latents& lat, Tensor& Q, Tensor& K, Tensor& V, int64_t first,
                              int64_t v_width) {
  const int64_t B = lat.kv_c.size(0), T = lat.kv_c.size(1), n = opt_.num_heads, D = dq();
  const Tensor q = q_up_->forward(ctx, lat.q_in);     // (B,T,n*D): per head [q_nope, q_pe]
  const Tensor kvu = kv_up_->forward(ctx, lat.kv_c);  // (B,T,n*(dn+dv)): per head [k_nope, v]
  Q = Tensor::empty({B, T, n, D}, q.dtype(), q.device());
  K = Tensor::empty({B, T, n, D}, q.dtype(), q.device());
  V = Tensor::empty({B, T, n, v_width}, q.dtype(), q.device());
  ops::mla_qkv_fwd(ctx.ex(), Q, K, V, q, kvu, lat.k_pe, rotary(first));
}

Tensor MultiLatentAttention::forward_body(StepContext& ctx, const Tensor& x) {
  HYTRA_CHECK(x.dim() == 3 && x.size(2) == opt_.hidden, "self_attention: input must be (B,T,", opt_.hidden, "), got ",
              x.desc());
  if (ctx.decode != nullptr) return decode_body(ctx, x);
  const int64_t B = x.size(0), T = x.size(1), n = opt_.num_heads, dv = opt_.v_head_dim;
  Saved& s = ctx.saved<Saved>(this);
  const Latents lat = down(ctx, x);
  up(ctx, lat, s.q, s.k, s.v, 0, dv);
  s.out = Tensor::empty({B, T, n, dv}, x.dtype(), x.device());
  s.lse = Tensor::empty({B, n, T}, stat_dtype(x.dtype()), x.device());
  ops::attention_fwd(ctx.ex(), s.out, s.lse, s.q, s.k, s.v, scale());
  Tensor y = proj_->forward(ctx, s.out.view({B, T, n * dv}));
  if (opt_.recompute_core) s.out = s.lse = Tensor();  // rebuilt from q, k, v in backward
  if (opt_.recompute_up) {                            // mla_up_proj: the latents kept, q, k and v rebuilt in backward
    s.lat = lat;
    s.q = s.k = s.v = Tensor();
  }
  return y;
}

Tensor MultiLatentAttention::decode_body(StepContext& ctx, const Tensor& x) {
  HYTRA_CHECK(x.size(1) == 1, "self_attention: decoding takes one token per sequence, got ", x.desc());
  DecodeCache& cache = *ctx.decode;
  const int64_t B = x.size(0), n = opt_.num_heads, D = dq(), dv = opt_.v_head_dim;
  Tensor q, k, v;  // rotated at the cache's position; v zero-padded to D
  up(ctx, down(ctx, x), q, k, v, cache.position(), D);
  Cache& c = cache.state<Cache>(this);
  if (!c.k.defined()) {
    c.k = Tensor::empty({B, cache.capacity(), n, D}, x.dtype(), x.device());
    c.v = Tensor::empty({B, cache.capacity(), n, D}, x.dtype(), x.device());
  }
  Tensor out = Tensor::empty({B, n, D}, x.dtype(), x.device());
  ops::attention_decode(ctx.ex(), out, c.k, c.v, q.view({B, n, D}), k.view({B, n, D}), v.view({B, n, D}),
                        cache.position(), scale(), 0, opt_.rotary_base, true);
  return proj_->forward(ctx, columns(ctx.ex(), out.view({B * n, D}), 0, dv).view({B, 1, n * dv}));
}

Tensor MultiLatentAttention::backward_body(StepContext& ctx, const Tensor& dy) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t dv = opt_.v_head_dim;
  if (!s.q.defined()) up(ctx, s.lat, s.q, s.k, s.v, 0, dv);  // mla_up_proj: the same (deterministic) ops again
  const int64_t B = s.q.size(0), T = s.q.size(1), n = opt_.num_heads, rkv = opt_.kv_lora_rank;
  const int64_t dn = opt_.qk_head_dim, dr = opt_.qk_pos_emb_head_dim;
  const DType dt = dy.dtype();
  const Device dev = dy.device();
  const Tensor dout = proj_->backward(ctx, dy).view({B, T, n, dv});
  if (!s.lse.defined()) {  // selective recompute "core_attn": the same (deterministic) forward again
    s.out = Tensor::empty(s.v.shape(), dt, dev);
    s.lse = Tensor::empty({B, n, T}, stat_dtype(dt), dev);
    ops::attention_fwd(ex, s.out, s.lse, s.q, s.k, s.v, scale());
  }
  Tensor dQ = Tensor::empty(s.q.shape(), dt, dev), dK = Tensor::empty(s.k.shape(), dt, dev);
  Tensor dV = Tensor::empty(s.v.shape(), dt, dev);
  ops::attention_bwd(ex, dQ, dK, dV, dout, s.q, s.k, s.v, s.out, s.lse, scale());

  // Back to the projections' per-head [q_nope, q_pe] and [k_nope, v], and the shared RoPE key's gradient summed
  // over the heads.
  Tensor dq_heads = Tensor::empty({B, T, n * dq()}, dt, dev), dkvu = Tensor::empty({B, T, n * (dn + dv)}, dt, dev);
  Tensor dk_pe = Tensor::empty({B, T, dr}, dt, dev);
  ops::mla_qkv_bwd(ex, dq_heads, dkvu, dk_pe, dQ, dK, dV, rotary(0));
  Tensor dx = q_up_->backward(ctx, dq_heads);
  if (q_down_) {
    if (q_norm_) dx = q_norm_->backward(ctx, dx);
    dx = q_down_->backward(ctx, dx);
  }
  Tensor dkv_c = kv_up_->backward(ctx, dkvu);
  if (kv_norm_) dkv_c = kv_norm_->backward(ctx, dkv_c);
  Tensor dkv = Tensor::empty({B, T, rkv + dr}, dt, dev);
  ops::slice_scatter(ex, dkv, dkv_c, 2, 0);
  ops::slice_scatter(ex, dkv, dk_pe, 2, rkv);
  ops::axpy(ex, dx, kv_down_->backward(ctx, dkv), 1.0);
  s = Saved{};
  return dx;
}

void MultiLatentAttention::backward_dw(StepContext& ctx) {
  proj_->backward_dw(ctx);
  kv_up_->backward_dw(ctx);
  kv_down_->backward_dw(ctx);
  q_up_->backward_dw(ctx);
  if (q_down_) q_down_->backward_dw(ctx);
}

}  // namespace hytra
