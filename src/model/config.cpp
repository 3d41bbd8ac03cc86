#include "model/config.h"

#include <utility>
#include <vector>

#include "core/error.h"

namespace hytra {

int64_t ModelConfig::padded_vocab_size() const {
  int64_t m = make_vocab_size_divisible_by > 0 ? make_vocab_size_divisible_by : 1;
  return (vocab_size + m - 1) / m * m;
}

int64_t ModelConfig::ffn_size() const {
  if (ffn_hidden_size > 0) return ffn_hidden_size;
  // Megatron: 4h, or int(8h/3/64)*64 for SwiGLU so the gated MLP keeps ~the same parameters.
  if (activation == "swiglu") return (8 * hidden_size / 3) / 64 * 64;
  return 4 * hidden_size;
}

void ModelConfig::validate() const {
  std::vector<std::string> errs;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) errs.push_back(msg);
  };
  need(hidden_size > 0, str("--hidden-size: expected a positive integer, got ", hidden_size));
  need(num_attention_heads > 0, str("--num-attention-heads: expected a positive integer, got ", num_attention_heads));
  if (num_attention_heads > 0) {
    need(kv_channels > 0 || hidden_size % num_attention_heads == 0,
         str("--num-attention-heads: must divide --hidden-size (", hidden_size, ") unless --kv-channels is set, got ",
             num_attention_heads));
    need(!group_query_attention || (num_query_groups > 0 && num_attention_heads % num_query_groups == 0),
         str("--num-query-groups: expected a divisor of --num-attention-heads (", num_attention_heads, "), got ",
             num_query_groups));
  }
  need(normalization == "LayerNorm" || normalization == "RMSNorm",
       str("--normalization: expected LayerNorm or RMSNorm, got '", normalization, "'"));
  need(norm_epsilon > 0, str("--norm-epsilon: expected a positive number, got ", norm_epsilon));
  need(activation == "gelu" || activation == "swiglu" || activation == "squared_relu",
       str("activation: expected gelu, swiglu or squared_relu, got '", activation, "'"));
  need(position_embedding_type == "learned_absolute" || position_embedding_type == "rope" ||
           position_embedding_type == "none",
       str("--position-embedding-type: expected learned_absolute, rope or none, got '", position_embedding_type,
           "'"));
  need(rotary_percent > 0 && rotary_percent <= 1, str("--rotary-percent: expected a value in (0, 1], got ", rotary_percent));
  if (position_embedding_type == "rope" && num_attention_heads > 0 && hidden_size > 0) {
    int64_t rot = int64_t(double(head_dim()) * rotary_percent);
    need(rot > 0 && rot % 2 == 0,
         str("--rotary-percent: head dim ", head_dim(), " x ", rotary_percent, " must give an even rotary dim, got ", rot));
  }
  need(init_method_std > 0, str("--init-method-std: expected a positive number, got ", init_method_std));
  need(hidden_dropout == 0.0, str("--hidden-dropout: only 0.0 is implemented in hytra, got ", hidden_dropout));
  need(attention_dropout == 0.0, str("--attention-dropout: only 0.0 is implemented in hytra, got ", attention_dropout));
  need(vocab_size > 0, str("--vocab-size: expected a positive integer (the tokenizer's vocabulary), got ", vocab_size));
  need(make_vocab_size_divisible_by > 0,
       str("--make-vocab-size-divisible-by: expected a positive integer, got ", make_vocab_size_divisible_by));
  need(seq_length > 0, str("--seq-length: expected a positive integer, got ", seq_length));
  if (position_embedding_type == "learned_absolute")
    need(max_positions() >= seq_length, str("--max-position-embeddings: expected >= --seq-length (", seq_length,
                                            "), got ", max_position_embeddings));
  for (auto [flag, v] : {std::pair<const char*, int64_t>{"--mamba-state-dim", mamba_state_dim},
                         {"--mamba-head-dim", mamba_head_dim},
                         {"--mamba-num-groups", mamba_num_groups},
                         {"--mamba-chunk-size", mamba_chunk_size},
                         {"--linear-conv-kernel-dim", linear_conv_kernel_dim},
                         {"--linear-key-head-dim", linear_key_head_dim},
                         {"--linear-value-head-dim", linear_value_head_dim},
                         {"--linear-num-key-heads", linear_num_key_heads},
                         {"--linear-num-value-heads", linear_num_value_heads}})
    need(v > 0, str(flag, ": expected a positive integer, got ", v));
  need(mamba_num_heads >= 0, str("--mamba-num-heads: expected a positive integer, got ", mamba_num_heads));
  if (mamba_head_dim > 0 && mamba_num_heads == 0 && hidden_size > 0)
    need(2 * hidden_size % mamba_head_dim == 0,
         str("--mamba-head-dim: must divide the Mamba inner width 2 x --hidden-size (", 2 * hidden_size,
             ") when --mamba-num-heads is not given, got ", mamba_head_dim));
  if (mamba_head_dim > 0 && mamba_num_groups > 0 && hidden_size > 0 && mamba_heads() > 0)
    need(mamba_heads() % mamba_num_groups == 0,
         str("--mamba-num-groups: must divide the Mamba heads (", mamba_heads(), "), got ", mamba_num_groups));
  if (linear_num_key_heads > 0)
    need(linear_num_value_heads % linear_num_key_heads == 0,
         str("--linear-num-value-heads: must be a multiple of --linear-num-key-heads (", linear_num_key_heads,
             "), got ", linear_num_value_heads));
  need(ffn_hidden_size >= 0, str("--ffn-hidden-size: expected a positive integer, got ", ffn_hidden_size));
  if (!errs.empty()) {
    std::string msg = "invalid model configuration:";
    for (auto& e : errs) msg += "\n  " + e;
    fail(msg);
  }
}

}  // namespace hytra
