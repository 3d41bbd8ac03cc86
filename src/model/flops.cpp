#include "model/flops.h"

namespace hytra {

int64_t matmul_params(const ModelConfig& cfg, const LayerCounts& counts) {
  const int64_t C = cfg.hidden_size, H = cfg.num_attention_heads, Hkv = cfg.kv_heads(), D = cfg.head_dim();
  const int64_t F = cfg.ffn_size();
  const int64_t attn = C * (H + 2 * Hkv) * D + H * D * C;          // linear_qkv + linear_proj
  const int64_t mlp = C * F * (cfg.activation == "swiglu" ? 2 : 1) + F * C;  // linear_fc1 + linear_fc2
  const int64_t head = cfg.padded_vocab_size() * C;                // output layer (tied or not)
  return counts.attention * attn + counts.mlp * mlp + head;
}

double flops_per_token(const ModelConfig& cfg, const LayerCounts& counts) {
  const double attn_core = 6.0 * double(counts.attention) * double(cfg.seq_length) *
                           double(cfg.num_attention_heads * cfg.head_dim());
  return 6.0 * double(matmul_params(cfg, counts)) + attn_core;
}

}  // namespace hytra
