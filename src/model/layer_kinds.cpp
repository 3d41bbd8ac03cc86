#include "model/layer_kinds.h"

#include <cmath>

#include "core/error.h"
#include "nn/attention.h"
#include "nn/gated_delta_net.h"
#include "nn/mamba2.h"
#include "nn/mla.h"
#include "nn/mlp.h"
#include "nn/moe/moe_layer.h"

namespace hytra {
namespace {

// Megatron: output projections (linear_proj, linear_fc2) use std / sqrt(2 * num_layers).
double output_std(const ModelConfig& c) { return c.init_method_std / std::sqrt(2.0 * double(c.num_layers)); }

// The options every pre-norm sub-layer shares (nn/pre_norm.h).
PreNormOptions pre_norm(const ModelConfig& c, const SubLayerSpec& s) {
  PreNormOptions o;
  o.tp = s.tp;
  o.norm = c.normalization;
  o.norm_eps = c.norm_epsilon;
  o.init_std = c.init_method_std;
  o.output_init_std = output_std(c);
  return o;
}

void check_mamba2(const ModelConfig& c, std::vector<std::string>& errors) {
  if (c.mamba_num_heads == 0 && (2 * c.hidden_size) % c.mamba_head_dim != 0)
    errors.push_back(str("--mamba-head-dim: must divide the Mamba inner width 2 x --hidden-size (", 2 * c.hidden_size,
                         ") when --mamba-num-heads is not given, got ", c.mamba_head_dim));
  else if (c.mamba_heads() % c.mamba_num_groups != 0)
    errors.push_back(
        str("--mamba-num-groups: must divide the Mamba heads (", c.mamba_heads(), "), got ", c.mamba_num_groups));
}

// out_norm is an RMSNorm over dv in every released gated delta net model; hytra builds only that.
void check_gdn(const ModelConfig& c, std::vector<std::string>& errors) {
  if (c.normalization != NormKind::RMSNorm)
    errors.push_back(
        str("--normalization: gated delta net layers ('G') need RMSNorm (their out_norm is an RMSNorm), "
            "got ",
            name_of(c.normalization)));
}

void check_moe(const ModelConfig& c, std::vector<std::string>& errors) {
  if (c.num_experts <= 0)
    errors.push_back("--num-experts: the pattern has mixture-of-experts layers ('E') but --num-experts is not set");
}

std::unique_ptr<Module> make_attention(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  AttentionOptions o;
  static_cast<PreNormOptions&>(o) = pre_norm(c, s);
  o.hidden = c.hidden_size;
  o.num_heads = c.num_attention_heads;
  o.num_kv_heads = c.kv_heads();
  o.head_dim = c.head_dim();
  o.qk_norm = c.qk_layernorm;
  o.recompute_core = c.recomputes(RecomputeModule::CoreAttn);
  o.bias = c.add_bias_linear;
  o.use_rope = c.position_embedding_type == PositionEmbedding::Rope;
  o.rotary_base = c.rotary_base;
  o.rotary_percent = c.rotary_percent;
  o.rotary_interleaved = c.rotary_interleaved;
  return std::make_unique<SelfAttention>(o, s.prefix, store);
}

// docs/spec/mla.md.
void check_mla(const ModelConfig& c, std::vector<std::string>& errors) {
  const size_t before = errors.size();
  for (const auto& [flag, v] : {std::pair{"--kv-lora-rank", c.kv_lora_rank},
                                {"--qk-head-dim", c.qk_head_dim},
                                {"--qk-pos-emb-head-dim", c.qk_pos_emb_head_dim},
                                {"--v-head-dim", c.v_head_dim}})
    if (v <= 0) errors.push_back(str(flag, ": expected a positive integer, got ", v));
  if (c.q_lora_rank < 0)
    errors.push_back(str("--q-lora-rank: expected a positive integer (or unset), got ", c.q_lora_rank));
  if (errors.size() > before) return;
  if (c.qk_pos_emb_head_dim % 2 != 0)
    errors.push_back(
        str("--qk-pos-emb-head-dim: RoPE rotates pairs, expected an even number, got ", c.qk_pos_emb_head_dim));
  if (c.v_head_dim > c.qk_head_dim + c.qk_pos_emb_head_dim)
    errors.push_back(
        str("--v-head-dim: multi-latent attention here needs at most --qk-head-dim + --qk-pos-emb-head-dim (",
            c.qk_head_dim + c.qk_pos_emb_head_dim, "), got ", c.v_head_dim));
  if (!(c.rotary_scaling_factor > 0 && std::isfinite(c.rotary_scaling_factor)))
    errors.push_back(str("--rotary-scaling-factor: expected a positive number, got ", c.rotary_scaling_factor));
  if (!std::isfinite(c.mscale) || !std::isfinite(c.mscale_all_dim))
    errors.push_back(
        str("--mscale, --mscale-all-dim: expected finite numbers, got ", c.mscale, ", ", c.mscale_all_dim));
  if (c.rotary_interleaved)
    errors.push_back("--rotary-interleaved: not with multi-latent attention (Megatron refuses it too)");
}

std::unique_ptr<Module> make_mla(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  MlaOptions o;
  static_cast<PreNormOptions&>(o) = pre_norm(c, s);
  o.hidden = c.hidden_size;
  o.num_heads = c.num_attention_heads;
  o.q_lora_rank = c.q_lora_rank;
  o.kv_lora_rank = c.kv_lora_rank;
  o.qk_head_dim = c.qk_head_dim;
  o.qk_pos_emb_head_dim = c.qk_pos_emb_head_dim;
  o.v_head_dim = c.v_head_dim;
  o.latent_norms = c.qk_layernorm;
  o.recompute_core = c.recomputes(RecomputeModule::CoreAttn);
  o.recompute_up = c.recomputes(RecomputeModule::MlaUpProj);
  o.bias = c.add_bias_linear;
  o.rotary_base = c.rotary_base;
  // YaRN unless --rope-type rope (docs/spec/mla.md §2): its frequencies and cos/sin scale, and the softmax scale m^2.
  // The original context is MLATransformerConfig's original_max_position_embeddings, 4096 (no Megatron flag).
  const int64_t dq = c.qk_head_dim + c.qk_pos_emb_head_dim;
  if (c.rope_type != "rope")
    o.yarn =
        yarn_rope(c.qk_pos_emb_head_dim, c.rotary_base, 4096.0, c.rotary_scaling_factor, c.mscale, c.mscale_all_dim);
  const double m = yarn_mscale(c.rotary_scaling_factor, c.mscale_all_dim);
  o.softmax_scale = m * m / std::sqrt(double(dq));
  return std::make_unique<MultiLatentAttention>(o, s.prefix, store);
}

std::unique_ptr<Module> make_mlp(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  MlpOptions o;
  static_cast<PreNormOptions&>(o) = pre_norm(c, s);
  o.hidden = c.hidden_size;
  o.ffn = c.ffn_size();
  o.activation = c.activation;
  o.glu_linear_offset = c.glu_linear_offset;
  o.bias = c.add_bias_linear;
  return std::make_unique<Mlp>(o, s.prefix, store);
}

std::unique_ptr<Module> make_mamba2(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  Mamba2Options o;
  static_cast<PreNormOptions&>(o) = pre_norm(c, s);
  o.hidden = c.hidden_size;
  o.num_heads = c.mamba_heads();
  o.head_dim = c.mamba_head_dim;
  o.state_dim = c.mamba_state_dim;
  o.num_groups = c.mamba_num_groups;
  o.chunk_size = c.mamba_chunk_size;
  return std::make_unique<Mamba2Mixer>(o, s.prefix, store);
}

std::unique_ptr<Module> make_gdn(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  GatedDeltaNetOptions o;
  static_cast<PreNormOptions&>(o) = pre_norm(c, s);
  o.hidden = c.hidden_size;
  o.key_heads = c.linear_num_key_heads;
  o.value_heads = c.linear_num_value_heads;
  o.key_head_dim = c.linear_key_head_dim;
  o.value_head_dim = c.linear_value_head_dim;
  o.conv_kernel = c.linear_conv_kernel_dim;
  return std::make_unique<GatedDeltaNet>(o, s.prefix, store);
}

ops::ExpertActivation expert_activation(Activation a) {
  switch (a) {
    case Activation::SwiGLU: return ops::ExpertActivation::SwiGLU;
    case Activation::QuickGeGLU: return ops::ExpertActivation::QuickGeGLU;
    case Activation::SquaredReLU: return ops::ExpertActivation::SquaredReLU;
    case Activation::GeLU: return ops::ExpertActivation::GeLU;
  }
  HYTRA_ASSERT(false, "an activation without an expert kernel");
}

std::unique_ptr<Module> make_moe(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  MoeOptions o;
  o.hidden = c.hidden_size;
  o.norm = c.normalization;
  o.norm_eps = c.norm_epsilon;
  RouterOptions& r = o.router;
  r.hidden = c.hidden_size;
  r.num_experts = c.num_experts;
  r.topk = c.moe_router_topk;
  r.score = c.moe_router_score_function;
  r.pre_softmax = c.moe_router_pre_softmax;
  r.num_groups = c.moe_router_num_groups;
  r.group_topk = c.moe_router_group_topk;
  r.scaling = c.moe_router_topk_scaling_factor > 0 ? c.moe_router_topk_scaling_factor : 1.0;
  r.fp32_logits = c.moe_router_dtype == RouterDtype::Fp32;
  r.bias = c.add_bias_linear;
  r.expert_bias = c.moe_router_enable_expert_bias;
  r.bias_update_rate = c.moe_router_bias_update_rate;
  r.balancing = c.moe_router_load_balancing_type;
  r.aux_coeff = c.moe_aux_loss_coeff;
  r.z_coeff = c.moe_z_loss_coeff;
  r.init_std = c.init_method_std;
  DispatchOptions& d = o.dispatch;
  d.num_experts = c.num_experts;
  d.topk = c.moe_router_topk;
  d.capacity_factor = c.moe_expert_capacity_factor.value_or(-1.0);  // < 0: dropless
  d.drop_by_position = c.moe_token_drop_policy == DropPolicy::Position;
  d.pad_to_capacity = c.moe_pad_expert_input_to_capacity;
  d.pad_multiple = c.moe_router_padding_for_quantization ? 16 : 0;
  ExpertsOptions& e = o.experts;
  e.hidden = c.hidden_size;
  e.ffn = c.moe_ffn_size();
  e.num_experts = c.num_experts;
  e.activation = expert_activation(c.activation);
  e.glu_interleave = c.moe_mlp_glu_interleave_size;
  e.linear_offset = c.glu_linear_offset;
  e.clamp = c.activation_func_clamp_value;
  e.bias = c.add_bias_linear;
  e.tp = s.tp;
  e.ep = s.ep;
  e.weight_layout = c.moe_single_grouped_weight ? ExpertLayout::Grouped : ExpertLayout::Indexed;
  e.bias_layout = c.moe_single_grouped_bias ? ExpertLayout::Grouped : ExpertLayout::Indexed;
  e.init_std = c.init_method_std;
  e.output_init_std = output_std(c);
  e.recompute_act = c.recomputes(RecomputeModule::MoeAct);
  o.recompute_shared = c.recomputes(RecomputeModule::SharedExperts);
  o.recompute_norm = c.recomputes(RecomputeModule::LayerNorm);
  o.shared_ffn = c.moe_shared_expert_intermediate_size;
  o.shared_gate = c.moe_shared_expert_gate;
  o.shared_activation = e.activation;
  return std::make_unique<MoeLayer>(o, s.prefix, s.layer_number, store);
}

// ---- FLOPs per token (model/flops.h): the weights a token is multiplied by, and the rest -------------
bool glu(const ModelConfig& c) { return is_glu(c.activation); }

int64_t attention_params(const ModelConfig& c) {  // linear_qkv + linear_proj
  const int64_t C = c.hidden_size, H = c.num_attention_heads, Hkv = c.kv_heads(), D = c.head_dim();
  return C * (H + 2 * Hkv) * D + H * D * C;
}
double attention_core_flops(const ModelConfig& c) {  // causal QK^T and PV, a step is 3 forwards
  return 6.0 * double(c.seq_length) * double(c.num_attention_heads * c.head_dim());
}
int64_t mla_params(const ModelConfig& c) {  // the down and up projections + linear_proj
  const int64_t h = c.hidden_size, n = c.num_attention_heads, rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  const int64_t dq = c.qk_head_dim + c.qk_pos_emb_head_dim, dv = c.v_head_dim;
  const int64_t query = rq > 0 ? h * rq + rq * n * dq : h * n * dq;
  return query + h * (rkv + c.qk_pos_emb_head_dim) + rkv * n * (c.qk_head_dim + dv) + n * dv * h;
}
double mla_core_flops(const ModelConfig& c) {  // causal QK^T over dn + dr and PV over dv, a step is 3 forwards
  return 3.0 * double(c.seq_length) * double(c.num_attention_heads) *
         double(c.qk_head_dim + c.qk_pos_emb_head_dim + c.v_head_dim);
}
int64_t mlp_params(const ModelConfig& c) {  // linear_fc1 + linear_fc2
  return c.hidden_size * c.ffn_size() * (glu(c) ? 2 : 1) + c.ffn_size() * c.hidden_size;
}
int64_t mamba_params(const ModelConfig& c) {  // in_proj + out_proj
  const int64_t C = c.hidden_size, Di = c.mamba_d_inner(), GN = c.mamba_num_groups * c.mamba_state_dim;
  return C * (2 * Di + 2 * GN + c.mamba_heads()) + Di * C;
}
double ssd_flops(const ModelConfig& c) {  // Megatron's hybrid_flops: the SSD scan, 7 d_inner N forward
  return 3.0 * 7.0 * double(c.mamba_d_inner() * c.mamba_state_dim);
}
int64_t gdn_params(const ModelConfig& c) {  // in_proj + out_proj
  const int64_t C = c.hidden_size, qk = c.linear_num_key_heads * c.linear_key_head_dim;
  const int64_t v = c.linear_num_value_heads * c.linear_value_head_dim;
  return C * (2 * qk + 2 * v + 2 * c.linear_num_value_heads) + v * C;
}
double delta_rule_flops(const ModelConfig& c) {  // hybrid_flops: 8 Hv dv dk and the conv 2 K (2 qk + v)
  const int64_t qk = c.linear_num_key_heads * c.linear_key_head_dim;
  const int64_t v = c.linear_num_value_heads * c.linear_value_head_dim;
  return 3.0 * (8.0 * double(c.linear_num_value_heads * c.linear_value_head_dim * c.linear_key_head_dim) +
                2.0 * double(c.linear_conv_kernel_dim * (2 * qk + v)));
}
int64_t moe_params(const ModelConfig& c) {  // router, k routed experts, the shared experts and their gate
  const int64_t C = c.hidden_size, Fe = c.moe_ffn_size(), Fs = c.moe_shared_expert_intermediate_size;
  const int64_t g = glu(c) ? 2 : 1;
  return c.num_experts * C + c.moe_router_topk * (C * Fe * g + Fe * C) + (C * Fs * g + Fs * C) +
         (c.moe_shared_expert_gate ? C : 0);
}
double no_flops(const ModelConfig&) { return 0.0; }

}  // namespace

const std::vector<LayerKind>& layer_kinds() {
  static const std::vector<LayerKind> kinds = {
      // symbol, name, mHC key, recompute module, factory, config check, matmul weights, other FLOPs
      {'*', "attention", "self_attention_hyper_connection.", std::nullopt, make_attention, nullptr, attention_params,
       attention_core_flops},
      {'D', "DeepSeek sparse attention", "self_attention_hyper_connection.", std::nullopt, nullptr, nullptr, nullptr,
       nullptr},
      {'G', "gated delta net", "hyper_connection.", std::nullopt, make_gdn, check_gdn, gdn_params, delta_rule_flops},
      {'M', "Mamba-2", "hyper_connection.", RecomputeModule::Mamba, make_mamba2, check_mamba2, mamba_params, ssd_flops},
      {'+', "multi-latent attention", "self_attention_hyper_connection.", std::nullopt, make_mla, check_mla, mla_params,
       mla_core_flops},
      {'-', "MLP", "mlp_hyper_connection.", RecomputeModule::Mlp, make_mlp, nullptr, mlp_params, no_flops},
      {'E', "mixture-of-experts", "mlp_hyper_connection.", RecomputeModule::Moe, make_moe, check_moe, moe_params,
       no_flops},
  };
  return kinds;
}

const LayerKind& layer_kind(char symbol) {
  for (const LayerKind& k : layer_kinds())
    if (k.symbol == symbol) return k;
  HYTRA_ASSERT(false, "layer symbol '", symbol, "' is not in the pattern language (the parser admits it)");
}

std::unique_ptr<Module> build_sublayer(const ModelConfig& cfg, const SubLayerSpec& spec, ParamStore& store) {
  const LayerKind& kind = layer_kind(spec.symbol);
  HYTRA_ASSERT(kind.build != nullptr, "layer symbol '", spec.symbol, "' is not built (validate refuses it)");
  return kind.build(cfg, spec, store);
}

bool selective_body(const ModelConfig& cfg, char symbol) {
  const std::optional<RecomputeModule> module = layer_kind(symbol).recompute_module;
  return module && cfg.recomputes(*module);
}

std::vector<std::string> tensor_parallel_errors(const ModelConfig& c, const LayerCounts& counts, int tp) {
  std::vector<std::string> errors;
  if (tp <= 1) return errors;
  auto need = [&](bool used, int64_t n, const std::string& what) {
    if (used && n % tp != 0)
      errors.push_back(str(what, " (", n, ") must be divisible by --tensor-model-parallel-size (", tp, ")"));
  };
  need(true, c.padded_vocab_size(),
       "--make-vocab-size-divisible-by: the padded vocabulary (--vocab-size rounded up to it)");
  const bool attention = counts.of('*') > 0, mamba = counts.of('M') > 0, gdn = counts.of('G') > 0;
  need(attention, c.num_attention_heads, "--num-attention-heads");
  need(attention, c.kv_heads(), "--num-query-groups: the KV groups");
  if (counts.of('+') > 0)
    errors.push_back(
        "--tensor-model-parallel-size: multi-latent attention ('+') is not split over tensor-parallel "
        "ranks yet (use 1)");
  need(mamba, c.mamba_heads(), "--mamba-num-heads: the Mamba heads");
  need(mamba, c.mamba_num_groups, "--mamba-num-groups");
  need(gdn, c.linear_num_key_heads, "--linear-num-key-heads");
  need(gdn, c.linear_num_value_heads, "--linear-num-value-heads");
  need(counts.of('-') > 0, c.ffn_size(), "--ffn-hidden-size");
  if (counts.of('E') > 0) {
    need(true, c.moe_ffn_size(), "--moe-ffn-hidden-size: each expert's FFN width");
    need(c.moe_shared_expert_intermediate_size > 0, c.moe_shared_expert_intermediate_size,
         "--moe-shared-expert-intermediate-size");
    if (c.moe_mlp_glu_interleave_size > 0 && (c.moe_ffn_size() / tp) % c.moe_mlp_glu_interleave_size != 0)
      errors.push_back(str("--moe-mlp-glu-interleave-size (", c.moe_mlp_glu_interleave_size,
                           ") must divide each tensor-parallel rank's expert FFN width (", c.moe_ffn_size() / tp, ")"));
  }
  return errors;
}

}  // namespace hytra
