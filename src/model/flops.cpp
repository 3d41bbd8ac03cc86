#include "model/flops.h"

namespace hytra {

int64_t matmul_params(const ModelConfig& cfg, const LayerCounts& counts) {
  const int64_t C = cfg.hidden_size, H = cfg.num_attention_heads, Hkv = cfg.kv_heads(), D = cfg.head_dim();
  const int64_t F = cfg.ffn_size();
  const int64_t attn = C * (H + 2 * Hkv) * D + H * D * C;          // linear_qkv + linear_proj
  const bool glu = cfg.activation == "swiglu" || cfg.activation == "quick_geglu";
  const int64_t mlp = C * F * (glu ? 2 : 1) + F * C;  // linear_fc1 + linear_fc2
  const int64_t Di = cfg.mamba_d_inner(), GN = cfg.mamba_num_groups * cfg.mamba_state_dim;
  const int64_t mamba = C * (2 * Di + 2 * GN + cfg.mamba_heads()) + Di * C;  // in_proj + out_proj
  const int64_t qk = cfg.linear_num_key_heads * cfg.linear_key_head_dim;
  const int64_t v = cfg.linear_num_value_heads * cfg.linear_value_head_dim;
  const int64_t gdn = C * (2 * qk + 2 * v + 2 * cfg.linear_num_value_heads) + v * C;  // in_proj + out_proj
  const int64_t Fe = cfg.moe_ffn_size(), Fs = cfg.moe_shared_expert_intermediate_size;
  const int64_t moe = cfg.num_experts * C + cfg.moe_router_topk * (C * Fe * (glu ? 2 : 1) + Fe * C) +
                      (C * Fs * (glu ? 2 : 1) + Fs * C) + (cfg.moe_shared_expert_gate ? C : 0);
  const int64_t head = cfg.padded_vocab_size() * C;                // output layer (tied or not)
  const int64_t mtp = 2 * C * C + head;                             // per MTP depth: eh_proj + its logits
  return counts.attention * attn + counts.mlp * mlp + counts.mamba * mamba + counts.gdn * gdn + counts.moe * moe +
         head + counts.mtp_depths * mtp;
}

double flops_per_token(const ModelConfig& cfg, const LayerCounts& counts) {
  const double attn_core = 6.0 * double(counts.attention) * double(cfg.seq_length) *
                           double(cfg.num_attention_heads * cfg.head_dim());
  // Megatron's hybrid_flops terms: the SSD scan 7 d_inner N forward; the delta rule 8 Hv dv dk and the
  // causal conv 2 K (2 qk + v) forward; a step is 3 forwards.
  const double ssd = 3.0 * double(counts.mamba) * 7.0 * double(cfg.mamba_d_inner() * cfg.mamba_state_dim);
  const int64_t qk = cfg.linear_num_key_heads * cfg.linear_key_head_dim;
  const int64_t v = cfg.linear_num_value_heads * cfg.linear_value_head_dim;
  const double delta = 3.0 * double(counts.gdn) *
                       (8.0 * double(cfg.linear_num_value_heads * cfg.linear_value_head_dim * cfg.linear_key_head_dim) +
                        2.0 * double(cfg.linear_conv_kernel_dim * (2 * qk + v)));
  return 6.0 * double(matmul_params(cfg, counts)) + attn_core + ssd + delta;
}

}  // namespace hytra
