#include "model/builder.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "nn/attention.h"
#include "nn/gated_delta_net.h"
#include "nn/mamba2.h"
#include "nn/moe/moe_layer.h"
#include "nn/mlp.h"

namespace hytra {
namespace {

// Selective recompute of `module` (--recompute-modules, docs/spec/recompute.md §3).
bool recompute(const ModelConfig& c, const char* module) {
  return c.recompute_granularity == "selective" &&
         std::find(c.recompute_modules.begin(), c.recompute_modules.end(), module) != c.recompute_modules.end();
}

NormKind norm_kind(const ModelConfig& c) { return c.normalization == "RMSNorm" ? NormKind::RMSNorm : NormKind::LayerNorm; }

// Megatron: output projections (linear_proj, linear_fc2) use std / sqrt(2 * num_layers).
double output_std(const ModelConfig& c) { return c.init_method_std / std::sqrt(2.0 * double(c.num_layers)); }

std::unique_ptr<Module> make_attention(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  AttentionOptions o;
  o.hidden = c.hidden_size;
  o.num_heads = c.num_attention_heads;
  o.num_kv_heads = c.kv_heads();
  o.head_dim = c.head_dim();
  o.qk_norm = c.qk_layernorm;
  o.recompute_core = recompute(c, "core_attn");
  o.bias = c.add_bias_linear;
  o.norm = norm_kind(c);
  o.norm_eps = c.norm_epsilon;
  o.use_rope = c.position_embedding_type == "rope";
  o.rotary_base = c.rotary_base;
  o.rotary_percent = c.rotary_percent;
  o.rotary_interleaved = c.rotary_interleaved;
  o.init_std = c.init_method_std;
  o.output_init_std = output_std(c);
  return std::make_unique<SelfAttention>(o, s.prefix, store);
}

std::unique_ptr<Module> make_mlp(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  MlpOptions o;
  o.hidden = c.hidden_size;
  o.ffn = c.ffn_size();
  o.activation = activation_from_name(c.activation);
  o.glu_linear_offset = c.glu_linear_offset;
  o.bias = c.add_bias_linear;
  o.norm = norm_kind(c);
  o.norm_eps = c.norm_epsilon;
  o.init_std = c.init_method_std;
  o.output_init_std = output_std(c);
  return std::make_unique<Mlp>(o, s.prefix, store);
}

std::unique_ptr<Module> make_mamba2(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  HYTRA_CHECK(c.mamba_num_heads > 0 || (2 * c.hidden_size) % c.mamba_head_dim == 0,
              "--mamba-head-dim: must divide the Mamba inner width 2 x --hidden-size (", 2 * c.hidden_size,
              ") when --mamba-num-heads is not given, got ", c.mamba_head_dim);
  Mamba2Options o;
  o.hidden = c.hidden_size;
  o.num_heads = c.mamba_heads();
  o.head_dim = c.mamba_head_dim;
  o.state_dim = c.mamba_state_dim;
  o.num_groups = c.mamba_num_groups;
  o.chunk_size = c.mamba_chunk_size;
  o.norm = norm_kind(c);
  o.norm_eps = c.norm_epsilon;
  o.init_std = c.init_method_std;
  o.output_init_std = output_std(c);
  return std::make_unique<Mamba2Mixer>(o, s.prefix, store);
}

std::unique_ptr<Module> make_gdn(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  // out_norm is an RMSNorm over dv in every released gated delta net model; hytra builds only that.
  HYTRA_CHECK(c.normalization == "RMSNorm", "--normalization: gated delta net layers ('G', physical layer ",
              s.layer_number, ") need RMSNorm (their out_norm is an RMSNorm), got ", c.normalization);
  GatedDeltaNetOptions o;
  o.hidden = c.hidden_size;
  o.key_heads = c.linear_num_key_heads;
  o.value_heads = c.linear_num_value_heads;
  o.key_head_dim = c.linear_key_head_dim;
  o.value_head_dim = c.linear_value_head_dim;
  o.conv_kernel = c.linear_conv_kernel_dim;
  o.norm = norm_kind(c);
  o.norm_eps = c.norm_epsilon;
  o.init_std = c.init_method_std;
  o.output_init_std = output_std(c);
  return std::make_unique<GatedDeltaNet>(o, s.prefix, store);
}

ops::ExpertActivation expert_activation(const std::string& name) {
  if (name == "swiglu") return ops::ExpertActivation::SwiGLU;
  if (name == "quick_geglu") return ops::ExpertActivation::QuickGeGLU;
  if (name == "squared_relu") return ops::ExpertActivation::SquaredReLU;
  return ops::ExpertActivation::GeLU;
}

std::unique_ptr<Module> make_moe(const ModelConfig& c, const SubLayerSpec& s, ParamStore& store) {
  HYTRA_CHECK(c.num_experts > 0, "--num-experts: the pattern has a mixture-of-experts layer ('E', physical layer ",
              s.layer_number, ") but --num-experts is not set");
  MoeOptions o;
  o.hidden = c.hidden_size;
  o.norm = norm_kind(c);
  o.norm_eps = c.norm_epsilon;
  RouterOptions& r = o.router;
  r.hidden = c.hidden_size;
  r.num_experts = c.num_experts;
  r.topk = c.moe_router_topk;
  r.score = c.moe_router_score_function == "sigmoid" ? ops::RouterScore::Sigmoid : ops::RouterScore::Softmax;
  r.pre_softmax = c.moe_router_pre_softmax;
  r.num_groups = c.moe_router_num_groups;
  r.group_topk = c.moe_router_group_topk;
  r.scaling = c.moe_router_topk_scaling_factor > 0 ? c.moe_router_topk_scaling_factor : 1.0;
  r.fp32_logits = !c.moe_router_dtype.empty();
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
  d.drop_by_position = c.moe_token_drop_policy == "position";
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
  e.weight_layout = c.moe_single_grouped_weight ? ExpertLayout::Grouped : ExpertLayout::Indexed;
  e.bias_layout = c.moe_single_grouped_bias ? ExpertLayout::Grouped : ExpertLayout::Indexed;
  e.init_std = c.init_method_std;
  e.output_init_std = output_std(c);
  e.recompute_act = recompute(c, "moe_act");
  o.recompute_shared = recompute(c, "shared_experts");
  o.recompute_norm = recompute(c, "layernorm");
  o.shared_ffn = c.moe_shared_expert_intermediate_size;
  o.shared_gate = c.moe_shared_expert_gate;
  o.shared_activation = e.activation;
  return std::make_unique<MoeLayer>(o, s.prefix, s.layer_number, store);
}

using Factory = std::unique_ptr<Module> (*)(const ModelConfig&, const SubLayerSpec&, ParamStore&);

// One row per symbol (docs/spec/pattern.md §1). Symbols without a row parse but do not build yet.
const std::map<char, Factory>& symbol_table() {
  static const std::map<char, Factory> table = {
      {'M', make_mamba2},
      {'*', make_attention},
      {'-', make_mlp},
      {'E', make_moe},
      {'G', make_gdn},
  };
  return table;
}

const char* symbol_name(char s) {
  switch (s) {
    case 'M': return "Mamba-2";
    case 'G': return "gated delta net";
    case 'E': return "mixture-of-experts";
    case 'D': return "DeepSeek sparse attention";
    case '+': return "multi-latent attention";
    default: return "layer";
  }
}

}  // namespace

std::unique_ptr<Module> build_sublayer(const ModelConfig& cfg, const SubLayerSpec& spec, ParamStore& store) {
  auto it = symbol_table().find(spec.symbol);
  HYTRA_CHECK(it != symbol_table().end(), "--hybrid-layer-pattern: layer symbol '", spec.symbol, "' (",
              symbol_name(spec.symbol), ", physical layer ", spec.layer_number, ") is not built yet in hytra");
  return it->second(cfg, spec, store);
}

}  // namespace hytra
