#include "model/architecture.h"

#include <set>

#include "core/json.h"

namespace hytra {
namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(bool v) { return v ? "true" : "false"; }
std::string text(double v) { return exact_number_text(v); }

// The layer kinds in order, without the `[...]` grouping: a GPT stack of N layers ([*-] x N) and
// the hybrid pattern *-*-... hold the same weights (checkpoint/key_map.h maps their keys).
std::string layer_sequence(const LayerPlan& plan) {
  std::string s;
  for (const LayerItem& it : plan.items) s += it.symbols;
  if (plan.mtp_depths > 0) {
    std::string depth;
    for (const LayerItem& it : plan.mtp_items) depth += it.symbols;
    for (int64_t d = 0; d < plan.mtp_depths; ++d) s += "/" + depth;
  }
  return s;
}

const std::set<std::string>& weight_defining() {
  static const std::set<std::string> names = {"layer_sequence",
                                              "hidden_size",
                                              "ffn_hidden_size",
                                              "num_attention_heads",
                                              "num_query_groups",
                                              "kv_channels",
                                              "qk_layernorm",
                                              "add_bias_linear",
                                              "normalization",
                                              "activation",
                                              "position_embedding_type",
                                              "max_position_embeddings",
                                              "rotary_percent",
                                              "rotary_interleaved",
                                              "untie_embeddings_and_output_weights",
                                              "vocab_size",
                                              "padded_vocab_size",
                                              "mamba_state_dim",
                                              "mamba_head_dim",
                                              "mamba_num_groups",
                                              "mamba_num_heads",
                                              "linear_conv_kernel_dim",
                                              "linear_key_head_dim",
                                              "linear_value_head_dim",
                                              "linear_num_key_heads",
                                              "linear_num_value_heads",
                                              "num_experts",
                                              "moe_ffn_hidden_size",
                                              "moe_router_topk",
                                              "moe_router_score_function",
                                              "moe_shared_expert_intermediate_size",
                                              "moe_shared_expert_gate",
                                              "moe_mlp_glu_interleave_size",
                                              "glu_linear_offset",
                                              "enable_mhc_connections",
                                              "mhc_num_residual_streams",
                                              "mhc_variant",
                                              "q_lora_rank",
                                              "kv_lora_rank",
                                              "qk_head_dim",
                                              "qk_pos_emb_head_dim",
                                              "v_head_dim"};
  return names;
}

}  // namespace

bool architecture_defines_weights(const std::string& name) { return weight_defining().count(name) > 0; }

std::vector<ArchitectureEntry> architecture_record(const ModelConfig& c, const LayerPlan& plan) {
  std::vector<ArchitectureEntry> r;
  auto add = [&](const char* name, const std::string& value) {
    r.push_back({name, value, architecture_defines_weights(name)});
  };
  const bool attention = plan.main && plan.main->find('*') != std::string::npos;
  const bool mamba = plan.main && plan.main->find('M') != std::string::npos;
  const bool gdn = plan.main && plan.main->find('G') != std::string::npos;
  const bool mla = plan.main && plan.main->find('+') != std::string::npos;
  const bool moe = c.num_experts > 0;
  add("layer_sequence", layer_sequence(plan));
  add("hybrid_layer_pattern", plan.main.value_or(""));
  add("hidden_size", text(c.hidden_size));
  add("ffn_hidden_size", text(c.ffn_size()));
  add("normalization", name_of(c.normalization));
  add("norm_epsilon", text(c.norm_epsilon));
  add("activation", name_of(c.activation));
  add("add_bias_linear", text(c.add_bias_linear));
  add("vocab_size", text(c.vocab_size));
  add("padded_vocab_size", text(c.padded_vocab_size()));
  add("untie_embeddings_and_output_weights", text(c.untie_embeddings_and_output_weights));
  add("position_embedding_type", name_of(c.position_embedding_type));
  if (c.position_embedding_type == PositionEmbedding::LearnedAbsolute)
    add("max_position_embeddings", text(c.max_positions()));
  add("seq_length", text(c.seq_length));
  if (attention) {
    add("num_attention_heads", text(c.num_attention_heads));
    add("num_query_groups", text(c.kv_heads()));
    add("kv_channels", text(c.head_dim()));
    add("qk_layernorm", text(c.qk_layernorm));
    if (c.position_embedding_type == PositionEmbedding::Rope) {
      add("rotary_percent", text(c.rotary_percent));
      add("rotary_interleaved", text(c.rotary_interleaved));
      add("rotary_base", text(c.rotary_base));
    }
  }
  if (mla) {  // (its RoPE is applied whatever --position-embedding-type says, as in Megatron)
    if (!attention) {
      add("num_attention_heads", text(c.num_attention_heads));
      add("qk_layernorm", text(c.qk_layernorm));
    }
    add("q_lora_rank", text(c.q_lora_rank));
    add("kv_lora_rank", text(c.kv_lora_rank));
    add("qk_head_dim", text(c.qk_head_dim));
    add("qk_pos_emb_head_dim", text(c.qk_pos_emb_head_dim));
    add("v_head_dim", text(c.v_head_dim));
    if (!(attention && c.position_embedding_type == PositionEmbedding::Rope)) add("rotary_base", text(c.rotary_base));
  }
  if (mamba) {
    add("mamba_state_dim", text(c.mamba_state_dim));
    add("mamba_head_dim", text(c.mamba_head_dim));
    add("mamba_num_groups", text(c.mamba_num_groups));
    add("mamba_num_heads", text(c.mamba_heads()));
  }
  if (gdn) {
    add("linear_conv_kernel_dim", text(c.linear_conv_kernel_dim));
    add("linear_key_head_dim", text(c.linear_key_head_dim));
    add("linear_value_head_dim", text(c.linear_value_head_dim));
    add("linear_num_key_heads", text(c.linear_num_key_heads));
    add("linear_num_value_heads", text(c.linear_num_value_heads));
  }
  if (moe) {
    add("num_experts", text(c.num_experts));
    add("moe_ffn_hidden_size", text(c.moe_ffn_size()));
    add("moe_router_topk", text(c.moe_router_topk));
    add("moe_router_score_function", name_of(c.moe_router_score_function));
    add("moe_router_enable_expert_bias", text(c.moe_router_enable_expert_bias));
    add("moe_router_load_balancing_type", name_of(c.moe_router_load_balancing_type));
    add("moe_shared_expert_intermediate_size", text(c.moe_shared_expert_intermediate_size));
    add("moe_shared_expert_gate", text(c.moe_shared_expert_gate));
    add("moe_mlp_glu_interleave_size", text(c.moe_mlp_glu_interleave_size));
    add("moe_expert_capacity_factor",
        c.moe_expert_capacity_factor ? text(*c.moe_expert_capacity_factor) : std::string("None"));
  }
  if (is_glu(c.activation)) add("glu_linear_offset", text(c.glu_linear_offset));
  add("enable_mhc_connections", text(c.enable_mhc));
  if (c.enable_mhc) {
    add("mhc_num_residual_streams", text(c.mhc_num_residual_streams));
    add("mhc_variant", name_of(c.mhc_variant));
    add("mhc_sinkhorn_iterations", text(c.mhc_sinkhorn_iterations));
  }
  return r;
}

}  // namespace hytra
