// MultiLatentAttention (`+`, docs/spec/mla.md): DeepSeek-V3's attention through low-rank latents.
// f(x) = linear_proj(attention(Q, K, V)) on x = input_layernorm(h), n heads:
//   q = linear_q_up_proj(norm(linear_q_down_proj(x))) (or linear_q_proj(x) without --q-lora-rank), n x (dn + dr):
//       per head the dn no-RoPE channels, then the dr RoPE ones;
//   [kv_c, k_pe] = linear_kv_down_proj(x) (rkv + dr); kv = linear_kv_up_proj(norm(kv_c)), n x (dn + dv): per head
//       k_nope (dn), then v (dv); k_pe, one RoPE key shared by every head;
//   Q = [rope(q_pe), q_nope], K = [rope(k_pe), k_nope] (every head the same k_pe), V = v; causal softmax attention
//       with scale 1/sqrt(dn + dr).
// The latent norms (with --qk-layernorm) use --normalization and --norm-epsilon. RoPE rotates adjacent pairs of the
// dr channels (ops rope_fwd, interleaved): Megatron de-interleaves them and rotates halves, which places the same
// values elsewhere in q and k alike, so every dot product is the same. The assembled heads put the dr RoPE channels
// first; one op (mla_qkv_fwd) builds Q, K and V from the up projections and the shared key, and one (mla_qkv_bwd)
// takes their gradients back. Training attends with V's dv channels (the attention op takes a value head dim of
// its own); decoding pads V with zeros to dn + dr channels (attention_decode's cache has one head dim).
// Keys (docs/spec/mla.md §3): input_layernorm.weight, self_attention.{linear_q_down_proj, linear_q_up_proj,
// linear_q_proj, linear_kv_down_proj, linear_kv_up_proj, linear_proj}.weight, linear_q_up_proj.layer_norm_weight and
// linear_kv_up_proj.layer_norm_weight.
#pragma once
#include <memory>
#include <string>

#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"
#include "ops/op_types.h"

namespace hytra {

// YaRN's RoPE over the dr channels (docs/spec/mla.md §2, ops mla_qkv_*); factor <= 1: plain RoPE.
struct YarnRope {
  double factor = 1.0, low = 0.0, high = 1.0;  // the extension factor and the ramp between pairs low and high
  double scale = 1.0;                          // cos and sin multiplied by it
};
// yarn_mscale(s, c) = 1 if s <= 1 else 0.1 c ln(s) + 1.
double yarn_mscale(double factor, double mscale);
// The rope for dr channels, RoPE base `base`, the original context `original_positions` (Megatron's
// original_max_position_embeddings), --rotary-scaling-factor, --mscale and --mscale-all-dim.
YarnRope yarn_rope(int64_t dr, double base, double original_positions, double factor, double mscale,
                   double mscale_all_dim);

struct MlaOptions : PreNormOptions {
  int64_t hidden = 0, num_heads = 0;  // h, n
  int64_t q_lora_rank = 0;            // rq (--q-lora-rank; 0: a plain query projection)
  int64_t kv_lora_rank = 32;          // rkv (--kv-lora-rank)
  int64_t qk_head_dim = 128;          // dn (--qk-head-dim)
  int64_t qk_pos_emb_head_dim = 64;   // dr (--qk-pos-emb-head-dim)
  int64_t v_head_dim = 128;           // dv (--v-head-dim)
  bool latent_norms = false;          // --qk-layernorm
  bool recompute_core = false;        // selective recompute "core_attn": rerun attention_fwd in backward
  bool recompute_up = false;          // selective recompute "mla_up_proj" (docs/spec/mla.md §4)
  bool bias = false;                  // add_bias_linear (linear_proj only: Megatron's MLA projections have none)
  double rotary_base = 10000.0;
  YarnRope yarn;
  double softmax_scale = 0.0;  // 0: 1 / sqrt(dn + dr); YaRN: yarn_mscale(factor, mscale_all_dim)^2 / sqrt(dn + dr)
};

class MultiLatentAttention : public PreNormModule {
 public:
  MultiLatentAttention(const MlaOptions& opt, const std::string& prefix, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override;  // y = norm(x) (B,T,h) -> (B,T,h)
  Tensor backward_body(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

 private:
  // What the up projections start from: the query latent after its norm (or, without --q-lora-rank, the layer's
  // normed input), the key/value latent after its norm, and the RoPE key before rotation (B,T,dr).
  struct Latents {
    Tensor q_in, kv_c, k_pe;
  };
  struct Saved {
    Latents lat;     // with recompute_up: what rebuilds q, k, v in the backward
    Tensor q, k, v;  // (B,T,n,dq), (B,T,n,dq), (B,T,n,dv): the assembled, rotated heads
    Tensor out;      // (B,T,n,dv)
    Tensor lse;      // (B,n,T)
  };
  struct Cache {  // one-token decoding (nn/decode_cache.h)
    Tensor k, v;  // (B,capacity,n,dn + dr): the assembled, rotated keys and the zero-padded values
  };
  // The down projections and latent norms of the normed input x.
  Latents down(StepContext& ctx, const Tensor& x);
  // The up projections and the assembled heads (B,T,n,dn + dr): q = [rope(q_pe), q_nope], k = [rope(k_pe),
  // k_nope] at positions first..first+T-1, and v = [v, 0] (B,T,n,v_width), v_width >= dv.
  void up(StepContext& ctx, const Latents& lat, Tensor& q, Tensor& k, Tensor& v, int64_t first, int64_t v_width);
  // The RoPE (YaRN or plain) of the dr channels from position first (ops mla_qkv_*).
  Rotary rotary(int64_t first) const;
  bool yarn() const { return opt_.yarn.factor > 1.0; }
  // forward_body with ctx.decode set: one token per sequence against the cached keys and values.
  Tensor decode_body(StepContext& ctx, const Tensor& x);
  int64_t dq() const { return opt_.qk_head_dim + opt_.qk_pos_emb_head_dim; }
  double scale() const;
  MlaOptions opt_;
  std::unique_ptr<Norm> norm_, q_norm_, kv_norm_;
  std::unique_ptr<Linear> q_down_, q_up_, kv_down_, kv_up_, proj_;
};

}  // namespace hytra
