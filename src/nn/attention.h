// SelfAttention (`*`): f(x) = linear_proj(attention(rope(qk_norm(split(linear_qkv(norm(x))))))).
// Keys under the layer prefix (docs/spec/names.md §1): self_attention.linear_qkv.layer_norm_weight (the
// pre-norm fused into the QKV GEMM in Megatron's TE spec), self_attention.linear_qkv.weight
// ((H + 2 Hkv) D, C) with rows grouped per KV group g as [H/Hkv query heads of g; k_g; v_g],
// self_attention.q_layernorm / k_layernorm (optional, over D), self_attention.linear_proj.weight (C, H D),
// biases with add_bias_linear. Causal, softmax scale 1/sqrt(D), RoPE rotate-half over
// int(D * rotary_percent) channels (docs/spec/README.md decision 7).
#pragma once
#include <memory>
#include <string>

#include "nn/linear.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"

namespace hytra {

struct AttentionOptions : PreNormOptions {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;  // C, H, Hkv, D
  bool qk_norm = false;                 // --qk-layernorm
  bool recompute_core = false;          // selective recompute "core_attn": rerun attention_fwd in backward
  bool bias = false;                    // add_bias_linear
  bool use_rope = true;                 // --position-embedding-type rope
  double rotary_base = 10000.0, rotary_percent = 1.0;
  bool rotary_interleaved = false;
};

class SelfAttention : public PreNormModule {
 public:
  SelfAttention(const AttentionOptions& opt, const std::string& prefix, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override;  // y = norm(x) (B,T,C) -> (B,T,C)
  Tensor backward_body(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

 private:
  struct Saved {
    Tensor q, k, v;  // (B,T,H,D), (B,T,Hkv,D) x2: attention inputs (after norm and RoPE)
    Tensor out;      // (B,T,H,D)
    Tensor lse;      // (B,H,T)
  };
  struct Cache {  // one-token decoding (nn/decode_cache.h)
    Tensor k, v;  // (B,capacity,Hkv,D): the rotated keys and the values of the positions so far
  };
  // forward_body with ctx.decode set: one token per sequence, (B,1,C), against the cached keys and values.
  Tensor decode_body(StepContext& ctx, const Tensor& y);
  // q (B,T,H,D), k, v (B,T,Hkv,D) out of the QKV projection, QK-normed, not rotated.
  void split_qkv(StepContext& ctx, const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v);
  int64_t rotary_dim() const;
  // Split and RoPE in one op (ops::qkv_rope_fwd); with QK-norm the norm sits between them.
  bool fused_split_rope() const { return opt_.use_rope && !opt_.qk_norm; }
  AttentionOptions opt_;
  std::unique_ptr<Norm> norm_, q_norm_, k_norm_;
  std::unique_ptr<Linear> qkv_, proj_;
};

}  // namespace hytra
