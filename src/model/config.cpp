#include "model/config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/model_plan.h"
#include "model/pattern.h"

namespace hytra {
namespace {
constexpr int64_t kMaxSinkhornIterations = 1000;
// Every expert gets parameters of its own; released MoE models use a few hundred.
constexpr int64_t kMaxExperts = 65536;
}  // namespace

int64_t ModelConfig::padded_vocab_size() const {
  int64_t m = make_vocab_size_divisible_by > 0 ? make_vocab_size_divisible_by : 1;
  return (vocab_size + m - 1) / m * m;
}

int64_t ModelConfig::ffn_size() const {
  if (ffn_hidden_size > 0) return ffn_hidden_size;
  // Megatron: 4h, or int(8h/3/64)*64 for SwiGLU so the gated MLP keeps ~the same parameters.
  if (activation == Activation::SwiGLU) return (8 * hidden_size / 3) / 64 * 64;
  return 4 * hidden_size;
}

bool ModelConfig::recomputes(RecomputeModule m) const {
  return recompute_granularity == RecomputeGranularity::Selective &&
         std::find(recompute_modules.begin(), recompute_modules.end(), m) != recompute_modules.end();
}

void ModelConfig::validate() const {
  std::vector<std::string> errs;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) errs.push_back(msg);
  };
  need(hidden_size > 0, str("--hidden-size: expected a positive integer, got ", hidden_size));
  // Bounds that keep the derived sizes (4 x hidden, padded vocab, heads x head dim, ...) and the
  // products of a few of them inside 64-bit shape arithmetic; no trainable model comes near them.
  for (auto [flag, v] : {std::pair<const char*, int64_t>{"--hidden-size", hidden_size},
                         {"--ffn-hidden-size", ffn_hidden_size},
                         {"--num-attention-heads", num_attention_heads},
                         {"--num-query-groups", num_query_groups},
                         {"--kv-channels", kv_channels},
                         {"--vocab-size", vocab_size},
                         {"--make-vocab-size-divisible-by", make_vocab_size_divisible_by},
                         {"--seq-length", seq_length},
                         {"--max-position-embeddings", max_position_embeddings},
                         {"--mamba-state-dim", mamba_state_dim},
                         {"--mamba-head-dim", mamba_head_dim},
                         {"--mamba-num-groups", mamba_num_groups},
                         {"--mamba-num-heads", mamba_num_heads},
                         {"--mamba-chunk-size", mamba_chunk_size},
                         {"--linear-conv-kernel-dim", linear_conv_kernel_dim},
                         {"--linear-key-head-dim", linear_key_head_dim},
                         {"--linear-value-head-dim", linear_value_head_dim},
                         {"--linear-num-key-heads", linear_num_key_heads},
                         {"--linear-num-value-heads", linear_num_value_heads},
                         {"--moe-ffn-hidden-size", moe_ffn_hidden_size},
                         {"--moe-router-topk", moe_router_topk},
                         {"--moe-router-num-groups", moe_router_num_groups},
                         {"--moe-router-group-topk", moe_router_group_topk},
                         {"--moe-shared-expert-intermediate-size", moe_shared_expert_intermediate_size},
                         {"--moe-mlp-glu-interleave-size", moe_mlp_glu_interleave_size},
                         {"--mhc-num-residual-streams", mhc_num_residual_streams},
                         {"--mhc-recompute-layer-num", mhc_recompute_layer_num},
                         {"--recompute-num-layers", recompute_num_layers},
                         {"--q-lora-rank", q_lora_rank},
                         {"--kv-lora-rank", kv_lora_rank},
                         {"--qk-head-dim", qk_head_dim},
                         {"--qk-pos-emb-head-dim", qk_pos_emb_head_dim},
                         {"--v-head-dim", v_head_dim}})
    need(v <= INT32_MAX, str(flag, ": expected at most ", INT32_MAX, ", got ", v));
  const bool sizes_bounded = errs.empty();  // the derived sizes below cannot overflow
  // The GPT stack and the ratios generate a pattern of --num-layers symbols.
  need(num_layers <= kMaxLayers, str("--num-layers: expected at most ", kMaxLayers, ", got ", num_layers));
  need(mtp_num_layers <= kMaxLayers, str("--mtp-num-layers: expected at most ", kMaxLayers, ", got ", mtp_num_layers));
  need(num_layers >= 0, str("--num-layers: expected a positive integer, got ", num_layers));
  need(mtp_num_layers >= 0, str("--mtp-num-layers: expected a non-negative integer, got ", mtp_num_layers));
  for (auto [flag, v] : {std::pair<const char*, int64_t>{"--decoder-first-pipeline-num-layers",
                                                         decoder_first_pipeline_num_layers},
                         {"--decoder-last-pipeline-num-layers", decoder_last_pipeline_num_layers}})
    need(v >= 0 && v <= kMaxLayers, str(flag, ": expected a number of layers (0: unset), got ", v));
  need(kv_channels >= 0, str("--kv-channels: expected a positive integer, got ", kv_channels));
  const double attention_ratio = hybrid_attention_ratio.value_or(0.0), mlp_ratio = hybrid_mlp_ratio.value_or(0.0);
  for (auto [flag, v] : {std::pair<const char*, double>{"--hybrid-attention-ratio", attention_ratio},
                         {"--hybrid-mlp-ratio", mlp_ratio}})
    need(v >= 0.0 && v <= 1.0, str(flag, ": expected a number in [0, 1], got ", v));
  need(!(attention_ratio + mlp_ratio > 1.0),
       str("--hybrid-mlp-ratio: --hybrid-attention-ratio + --hybrid-mlp-ratio must be at most 1, got ",
           attention_ratio + mlp_ratio));
  need(num_attention_heads > 0, str("--num-attention-heads: expected a positive integer, got ", num_attention_heads));
  if (num_attention_heads > 0) {
    need(kv_channels > 0 || hidden_size % num_attention_heads == 0,
         str("--num-attention-heads: must divide --hidden-size (", hidden_size, ") unless --kv-channels is set, got ",
             num_attention_heads));
    need(!group_query_attention || (num_query_groups > 0 && num_attention_heads % num_query_groups == 0),
         str("--num-query-groups: expected a divisor of --num-attention-heads (", num_attention_heads, "), got ",
             num_query_groups));
  }
  need(norm_epsilon > 0 && std::isfinite(norm_epsilon),
       str("--norm-epsilon: expected a positive finite number, got ", norm_epsilon));
  need(rotary_percent > 0 && rotary_percent <= 1,
       str("--rotary-percent: expected a value in (0, 1], got ", rotary_percent));
  need(rotary_base > 0 && std::isfinite(rotary_base),
       str("--rotary-base: expected a positive finite number, got ", rotary_base));
  if (position_embedding_type == PositionEmbedding::Rope && num_attention_heads > 0 && hidden_size > 0) {
    int64_t rot = int64_t(double(head_dim()) * rotary_percent);
    need(rot > 0 && rot % 2 == 0, str("--rotary-percent: head dim ", head_dim(), " x ", rotary_percent,
                                      " must give an even rotary dim, got ", rot));
  }
  need(init_method_std > 0 && std::isfinite(init_method_std),
       str("--init-method-std: expected a positive finite number, got ", init_method_std));
  need(std::isfinite(glu_linear_offset), str("--glu-linear-offset: expected a finite number, got ", glu_linear_offset));
  need(hidden_dropout == 0.0, str("--hidden-dropout: only 0.0 is implemented in hytra, got ", hidden_dropout));
  need(attention_dropout == 0.0, str("--attention-dropout: only 0.0 is implemented in hytra, got ", attention_dropout));
  need(vocab_size > 0, str("--vocab-size: expected a positive integer (the tokenizer's vocabulary), got ", vocab_size));
  need(make_vocab_size_divisible_by > 0,
       str("--make-vocab-size-divisible-by: expected a positive integer, got ", make_vocab_size_divisible_by));
  need(seq_length > 0, str("--seq-length: expected a positive integer, got ", seq_length));
  need(max_position_embeddings >= 0,
       str("--max-position-embeddings: expected a positive integer, got ", max_position_embeddings));
  if (position_embedding_type == PositionEmbedding::LearnedAbsolute)
    need(max_positions() >= seq_length,
         str("--max-position-embeddings: expected >= --seq-length (", seq_length, "), got ", max_position_embeddings));
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
  if (linear_num_key_heads > 0)
    need(linear_num_value_heads % linear_num_key_heads == 0,
         str("--linear-num-value-heads: must be a multiple of --linear-num-key-heads (", linear_num_key_heads,
             "), got ", linear_num_value_heads));
  if (num_experts > 0) {
    need(num_experts <= kMaxExperts, str("--num-experts: expected at most ", kMaxExperts, ", got ", num_experts));
    need(moe_ffn_hidden_size >= 0,
         str("--moe-ffn-hidden-size: expected a positive integer, got ", moe_ffn_hidden_size));
    need(moe_router_num_groups >= 0,
         str("--moe-router-num-groups: expected a positive integer, got ", moe_router_num_groups));
    need(moe_router_topk_scaling_factor >= 0 && std::isfinite(moe_router_topk_scaling_factor),
         str("--moe-router-topk-scaling-factor: expected a finite number >= 0, got ", moe_router_topk_scaling_factor));
    const bool sigmoid = moe_router_score_function == RouterScore::Sigmoid;
    need(moe_router_topk >= 1 && moe_router_topk <= num_experts,
         str("--moe-router-topk: expected 1..--num-experts (", num_experts, "), got ", moe_router_topk));
    need(sigmoid || moe_router_topk != 1 || moe_router_pre_softmax,
         "--moe-router-pre-softmax: Megatron requires it with softmax routing and --moe-router-topk 1");
    need(!moe_router_enable_expert_bias || sigmoid,
         "--moe-router-enable-expert-bias: needs --moe-router-score-function sigmoid");
    need(moe_router_group_topk == 0 || moe_router_num_groups > 0,
         "--moe-router-group-topk: needs --moe-router-num-groups");
    need(moe_z_loss_coeff >= 0 && std::isfinite(moe_z_loss_coeff),
         str("--moe-z-loss-coeff: expected a finite number >= 0, got ", moe_z_loss_coeff));
    need(moe_aux_loss_coeff >= 0 && std::isfinite(moe_aux_loss_coeff),
         str("--moe-aux-loss-coeff: expected a finite number >= 0, got ", moe_aux_loss_coeff));
    need(moe_router_bias_update_rate >= 0 && std::isfinite(moe_router_bias_update_rate),
         str("--moe-router-bias-update-rate: expected a finite number >= 0, got ", moe_router_bias_update_rate));
    if (moe_router_num_groups > 0) {
      need(num_experts % moe_router_num_groups == 0,
           str("--moe-router-num-groups: must divide --num-experts (", num_experts, "), got ", moe_router_num_groups));
      need(moe_router_group_topk >= 1 && moe_router_group_topk <= moe_router_num_groups &&
               moe_router_group_topk <= moe_router_topk &&
               moe_router_topk <= moe_router_group_topk * (num_experts / moe_router_num_groups),
           str("--moe-router-group-topk: expected 1..min(--moe-router-num-groups, --moe-router-topk) with enough "
               "experts in the kept groups for --moe-router-topk, got ",
               moe_router_group_topk));
    }
    need(moe_router_dtype != RouterDtype::Fp64,
         "--moe-router-dtype: fp64 routing is not implemented in hytra (use fp32)");
    const double capacity = moe_expert_capacity_factor.value_or(1.0);
    need(capacity > 0 && std::isfinite(capacity),
         str("--moe-expert-capacity-factor: expected a positive finite number (or None: dropless), got ",
             moe_expert_capacity_factor.value_or(0.0)));
    need(!moe_pad_expert_input_to_capacity || moe_expert_capacity_factor,
         "--moe-pad-expert-input-to-capacity: needs --moe-expert-capacity-factor");
    const bool glu = is_glu(activation);
    need(!sizes_bounded ||
             (moe_mlp_glu_interleave_size >= 0 &&
              (moe_mlp_glu_interleave_size == 0 || (glu && moe_ffn_size() % moe_mlp_glu_interleave_size == 0))),
         str("--moe-mlp-glu-interleave-size: expected a divisor of the expert width (", moe_ffn_size(),
             ") with a GLU activation, got ", moe_mlp_glu_interleave_size));
    need(activation_func_clamp_value >= 0 && std::isfinite(activation_func_clamp_value),
         str("--activation-func-clamp-value: expected a positive finite number, got ", activation_func_clamp_value));
    need(activation_func_clamp_value == 0 || activation != Activation::SwiGLU || glu_linear_offset == 0,
         "--glu-linear-offset: must be 0 with --swiglu and --activation-func-clamp-value (Megatron)");
    need(moe_shared_expert_intermediate_size >= 0,
         str("--moe-shared-expert-intermediate-size: expected a positive integer, got ",
             moe_shared_expert_intermediate_size));
  }
  if (enable_mhc) {
    need(mhc_num_residual_streams >= 1 && mhc_num_residual_streams <= 16,
         str("--mhc-num-residual-streams: expected 1..16, got ", mhc_num_residual_streams));
    // Every iteration is kept for the backward; Sinkhorn converges in tens (Megatron's default: 20).
    need(mhc_sinkhorn_iterations >= 1 && mhc_sinkhorn_iterations <= kMaxSinkhornIterations,
         str("--mhc-sinkhorn-iterations: expected 1..", kMaxSinkhornIterations, ", got ", mhc_sinkhorn_iterations));
    need(mhc_init_gating_factor >= 0 && std::isfinite(mhc_init_gating_factor),
         str("--mhc-init-gating-factor: expected a finite number >= 0, got ", mhc_init_gating_factor));
    need(mhc_recompute_layer_num >= 0,
         str("--mhc-recompute-layer-num: expected a positive integer, got ", mhc_recompute_layer_num));
  }
  if (recompute_granularity == RecomputeGranularity::Full) {
    need(recompute_method != RecomputeMethod::None, "--recompute-method: full recompute needs uniform or block");
    need(recompute_num_layers >= 1,
         str("--recompute-num-layers: full recompute needs a positive count, got ", recompute_num_layers));
  } else if (recompute_granularity == RecomputeGranularity::Selective) {
    need(recompute_num_layers == 0, "--recompute-num-layers: must be unset with selective recompute");
    need(!recomputes(RecomputeModule::Mhc) || enable_mhc, "--recompute-modules: 'mhc' needs --enable-mhc-connections");
    need(!(recomputes(RecomputeModule::Mhc) && recomputes(RecomputeModule::Mlp)),
         "--recompute-modules: 'mhc' and 'mlp' cannot be combined (Megatron)");
  }
  need(mhc_recompute_layer_num == 0 || recomputes(RecomputeModule::Mhc),
       "--mhc-recompute-layer-num: needs --recompute-granularity selective --recompute-modules mhc");
  need(mtp_loss_scaling_factor >= 0 && std::isfinite(mtp_loss_scaling_factor),
       str("--mtp-loss-scaling-factor: expected a finite number >= 0, got ", mtp_loss_scaling_factor));
  need(ffn_hidden_size >= 0, str("--ffn-hidden-size: expected a positive integer, got ", ffn_hidden_size));
  if (ffn_hidden_size == 0 && hidden_size > 0 && sizes_bounded)
    need(ffn_size() > 0, str("--ffn-hidden-size: the default for --hidden-size ", hidden_size,
                             " with --swiglu, int(8 x hidden / 3 / 64) x 64, is 0; set --ffn-hidden-size"));
  if (errs.empty()) {  // the pattern and what its layer kinds need (model/model_plan.h), on valid fields only
    try {
      check_plan(*this, plan_for(*this), errs);
    } catch (const Error& e) {
      errs.push_back(e.what());
    }
  }
  if (!errs.empty()) {
    std::string msg = "invalid model configuration:";
    for (auto& e : errs) msg += "\n  " + e;
    fail(msg);
  }
}

}  // namespace hytra
