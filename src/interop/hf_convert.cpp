#include "interop/hf_convert.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/float_decode.h"
#include "checkpoint/safetensors.h"
#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"

namespace hytra {
namespace fs = std::filesystem;

const char* hf_family_name(HfFamily f) {
  switch (f) {
    case HfFamily::Llama: return "llama";
    case HfFamily::Qwen3Moe: return "qwen3_moe";
    case HfFamily::NemotronH: return "nemotron_h";
    case HfFamily::DeepseekV3: return "deepseek_v3";
  }
  return "?";
}

HfFamily hf_family_of(const std::string& name) {
  for (HfFamily f : {HfFamily::Llama, HfFamily::Qwen3Moe, HfFamily::NemotronH, HfFamily::DeepseekV3})
    if (name == hf_family_name(f)) return f;
  fail(str("--hf-family: expected llama, qwen3_moe, nemotron_h or deepseek_v3, got '", name, "'"));
}

namespace {

// One physical sub-layer: its symbol, hytra's key prefix and its layer index in the family's naming.
struct SubLayer {
  char symbol;
  std::string prefix;  // "decoder.layers.<logical>."
  int64_t hf_layer;
};

std::vector<SubLayer> sublayers(const LayerPlan& plan, HfFamily family) {
  std::vector<SubLayer> out;
  int64_t attention = 0, mlp = 0;
  for (const LayerItem& item : plan.items)
    for (size_t j = 0; j < item.symbols.size(); ++j) {
      const char s = item.symbols[j];
      // NemotronH: one block per physical layer. Llama / Qwen3 / DeepSeek-V3: layer k is the k-th attention with the
      // k-th MLP.
      const int64_t hf = family == HfFamily::NemotronH ? item.physical[j] - 1
                         : s == '*' || s == '+'        ? attention++
                                                       : mlp++;
      out.push_back({s, "decoder.layers." + std::to_string(item.logical) + ".", hf});
    }
  return out;
}

// The physical sequence of the main pattern (groups flattened).
std::string physical_sequence(const LayerPlan& plan) {
  std::string s;
  for (const LayerItem& item : plan.items) s += item.symbols;
  return s;
}

// How one group of hytra tensors corresponds to HF tensors.
struct Rule {
  enum Kind { Copy, VocabRows, Qkv, Glu } kind = Copy;
  std::string hytra;
  std::vector<std::string> hf;  // Copy / VocabRows: one; Qkv: q, k, v; Glu: gate, up
  bool keep_fp32 = false;       // stays fp32 in a bf16 export (Mamba's A_log, D, dt_bias; the expert bias)
};

std::vector<Rule> rules_for(const ModelConfig& mc, const LayerPlan& plan, HfFamily family) {
  std::vector<Rule> r;
  const bool nemo = family == HfFamily::NemotronH;
  const std::string model = nemo ? "backbone." : "model.";
  r.push_back({Rule::VocabRows,
               "embedding.word_embeddings.weight",
               {model + (nemo ? "embeddings.weight" : "embed_tokens.weight")}});
  // One sub-layer of symbol `symbol`, hytra's key prefix p, the family's layer prefix h.
  auto sublayer = [&](char symbol, const std::string& p, const std::string& h) {
    const std::string attn = nemo ? h + "mixer." : h + "self_attn.", mlp = nemo ? h + "mixer." : h + "mlp.";
    auto copy = [&](const std::string& a, const std::string& b, bool fp32 = false) {
      r.push_back({Rule::Copy, p + a, {b}, fp32});
    };
    switch (symbol) {
      case '+':  // docs/spec/mla.md §3: every tensor as it is
        copy("input_layernorm.weight", h + "input_layernorm.weight");
        if (mc.q_lora_rank > 0) {
          copy("self_attention.linear_q_down_proj.weight", attn + "q_a_proj.weight");
          copy("self_attention.linear_q_up_proj.layer_norm_weight", attn + "q_a_layernorm.weight");
          copy("self_attention.linear_q_up_proj.weight", attn + "q_b_proj.weight");
        } else {
          copy("self_attention.linear_q_proj.weight", attn + "q_proj.weight");
        }
        copy("self_attention.linear_kv_down_proj.weight", attn + "kv_a_proj_with_mqa.weight");
        copy("self_attention.linear_kv_up_proj.layer_norm_weight", attn + "kv_a_layernorm.weight");
        copy("self_attention.linear_kv_up_proj.weight", attn + "kv_b_proj.weight");
        copy("self_attention.linear_proj.weight", attn + "o_proj.weight");
        break;
      case '*':
        copy("self_attention.linear_qkv.layer_norm_weight", nemo ? h + "norm.weight" : h + "input_layernorm.weight");
        r.push_back({Rule::Qkv,
                     p + "self_attention.linear_qkv.weight",
                     {attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"}});
        copy("self_attention.linear_proj.weight", attn + "o_proj.weight");
        if (mc.qk_layernorm) {
          copy("self_attention.q_layernorm.weight", attn + "q_norm.weight");
          copy("self_attention.k_layernorm.weight", attn + "k_norm.weight");
        }
        break;
      case '-':
        copy("mlp.linear_fc1.layer_norm_weight", nemo ? h + "norm.weight" : h + "post_attention_layernorm.weight");
        if (nemo)
          copy("mlp.linear_fc1.weight", mlp + "up_proj.weight");
        else
          r.push_back({Rule::Glu, p + "mlp.linear_fc1.weight", {mlp + "gate_proj.weight", mlp + "up_proj.weight"}});
        copy("mlp.linear_fc2.weight", mlp + "down_proj.weight");
        break;
      case 'E':
        copy("pre_mlp_layernorm.weight", nemo ? h + "norm.weight" : h + "post_attention_layernorm.weight");
        copy("mlp.router.weight", mlp + "gate.weight");
        if (mc.moe_router_enable_expert_bias)
          copy("mlp.router.expert_bias", mlp + "gate.e_score_correction_bias", /*fp32=*/true);
        for (int64_t e = 0; e < mc.num_experts; ++e) {
          const std::string x = mlp + "experts." + std::to_string(e) + ".", i = std::to_string(e);
          if (nemo)
            copy("mlp.experts.linear_fc1.weight" + i, x + "up_proj.weight");
          else
            r.push_back(
                {Rule::Glu, p + "mlp.experts.linear_fc1.weight" + i, {x + "gate_proj.weight", x + "up_proj.weight"}});
          copy("mlp.experts.linear_fc2.weight" + i, x + "down_proj.weight");
        }
        if (mc.moe_shared_expert_intermediate_size > 0) {
          if (nemo)
            copy("mlp.shared_experts.linear_fc1.weight", mlp + "shared_experts.up_proj.weight");
          else
            r.push_back({Rule::Glu,
                         p + "mlp.shared_experts.linear_fc1.weight",
                         {mlp + "shared_experts.gate_proj.weight", mlp + "shared_experts.up_proj.weight"}});
          copy("mlp.shared_experts.linear_fc2.weight", mlp + "shared_experts.down_proj.weight");
        }
        break;
      case 'M':
        copy("mixer.in_proj.layer_norm_weight", h + "norm.weight");
        for (const char* k : {"in_proj.weight", "conv1d.weight", "conv1d.bias", "norm.weight", "out_proj.weight"})
          copy(std::string("mixer.") + k, h + "mixer." + k);
        for (const char* k : {"A_log", "D", "dt_bias"}) copy(std::string("mixer.") + k, h + "mixer." + k, true);
        break;
      default: fail(str("hytra convert: layer symbol '", symbol, "' has no ", hf_family_name(family), " form"));
    }
  };
  for (const SubLayer& s : sublayers(plan, family))
    sublayer(s.symbol, s.prefix, model + "layers." + std::to_string(s.hf_layer) + ".");
  // DeepSeek-V3's MTP depth d is layer L + d after the L main layers: its norms and projection, its transformer
  // layer, and copies of the embedding and LM head (the released files carry them; docs/spec/hf_names.md).
  const int64_t main_layers = int64_t(physical_sequence(plan).size() / 2);
  for (int64_t d = 0; family == HfFamily::DeepseekV3 && d < plan.mtp_depths; ++d) {
    const std::string p = "mtp.layers." + std::to_string(d) + ".";
    const std::string h = model + "layers." + std::to_string(main_layers + d) + ".";
    for (const char* k : {"enorm.weight", "hnorm.weight", "eh_proj.weight"}) r.push_back({Rule::Copy, p + k, {h + k}});
    r.push_back({Rule::Copy, p + "final_layernorm.weight", {h + "shared_head.norm.weight"}});
    for (size_t j = 0; j < plan.mtp_items.size(); ++j)
      sublayer(plan.mtp_items[j].symbols[0], p + "mtp_model_layer.layers." + std::to_string(j) + ".", h);
    r.push_back({Rule::VocabRows, "embedding.word_embeddings.weight", {h + "embed_tokens.weight"}});
    r.push_back({Rule::VocabRows,
                 mc.untie_embeddings_and_output_weights ? "output_layer.weight" : "embedding.word_embeddings.weight",
                 {h + "shared_head.head.weight"}});
  }
  // The final norm's canonical name: decoder.final_layernorm with groups in the main pattern (names.md).
  const bool grouped = plan.main && plan.main->find('[') != std::string::npos;
  r.push_back({Rule::Copy,
               grouped ? "decoder.final_layernorm.weight" : "decoder.final_norm.weight",
               {model + (nemo ? "norm_f.weight" : "norm.weight")}});
  if (mc.untie_embeddings_and_output_weights) r.push_back({Rule::VocabRows, "output_layer.weight", {"lm_head.weight"}});
  return r;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Rows [begin, begin + count) of a 2-D (or more) tensor.
HostTensor rows(const HostTensor& t, int64_t begin, int64_t count) {
  const int64_t w = numel(t.shape) / t.shape[0];
  HostTensor out{t.shape, {}};
  out.shape[0] = count;
  out.values.assign(t.values.begin() + begin * w, t.values.begin() + (begin + count) * w);
  return out;
}

void append_rows(HostTensor& to, const HostTensor& from) {
  if (to.shape.empty()) to.shape = from.shape, to.shape[0] = 0;
  HYTRA_ASSERT(
      numel(to.shape) / std::max<int64_t>(to.shape[0], 1) == numel(from.shape) / from.shape[0] || to.shape[0] == 0,
      "append_rows: widths differ");
  to.shape[0] += from.shape[0];
  to.values.insert(to.values.end(), from.values.begin(), from.values.end());
}

// The fused QKV [(nq + 2g) d, h] as Megatron groups it: per query group, its nq/g query heads, then its key and value
// head (hf_names.md §1).
struct QkvLayout {
  int64_t heads, groups, dim;
  int64_t group_rows() const { return (heads / groups + 2) * dim; }
};

std::vector<HostTensor> split_qkv(const HostTensor& w, const QkvLayout& q) {
  std::vector<HostTensor> out(3);
  const int64_t per = q.heads / q.groups * q.dim;
  for (int64_t g = 0; g < q.groups; ++g) {
    const int64_t at = g * q.group_rows();
    append_rows(out[0], rows(w, at, per));
    append_rows(out[1], rows(w, at + per, q.dim));
    append_rows(out[2], rows(w, at + per + q.dim, q.dim));
  }
  return out;
}

HostTensor fuse_qkv(const std::vector<const HostTensor*>& qkv, const QkvLayout& q) {
  HostTensor w;
  const int64_t per = q.heads / q.groups * q.dim;
  for (int64_t g = 0; g < q.groups; ++g) {
    append_rows(w, rows(*qkv[0], g * per, per));
    append_rows(w, rows(*qkv[1], g * q.dim, q.dim));
    append_rows(w, rows(*qkv[2], g * q.dim, q.dim));
  }
  return w;
}

SafetensorsTensor to_file(const std::string& name, const HostTensor& t, bool bf16) {
  SafetensorsTensor f{name, bf16 ? "BF16" : "F32", t.shape, {}};
  if (!bf16) {
    f.bytes.resize(t.values.size() * 4);
    std::memcpy(f.bytes.data(), t.values.data(), f.bytes.size());
    return f;
  }
  f.bytes.resize(t.values.size() * 2);
  for (size_t i = 0; i < t.values.size(); ++i) {
    const uint16_t b = float_to_bf16(t.values[i]).bits;
    f.bytes[2 * i] = uint8_t(b & 0xff);
    f.bytes[2 * i + 1] = uint8_t(b >> 8);
  }
  return f;
}

std::string config_json(const ModelConfig& mc, const LayerPlan& plan, HfFamily family, bool bf16) {
  std::vector<std::pair<std::string, std::string>> f;  // key, JSON text
  auto num = [&](const std::string& k, double v) { f.push_back({k, exact_number_text(v)}); };
  auto integer = [&](const std::string& k, int64_t v) { f.push_back({k, std::to_string(v)}); };
  auto text = [&](const std::string& k, const std::string& v) { f.push_back({k, json_quote(v)}); };
  auto flag = [&](const std::string& k, bool v) { f.push_back({k, v ? "true" : "false"}); };
  const std::string seq = physical_sequence(plan);
  const bool nemo = family == HfFamily::NemotronH;
  const bool deepseek = family == HfFamily::DeepseekV3;
  const char* arch = nemo                        ? "NemotronHForCausalLM"
                     : family == HfFamily::Llama ? "LlamaForCausalLM"
                     : deepseek                  ? "DeepseekV3ForCausalLM"
                                                 : "Qwen3MoeForCausalLM";
  f.push_back({"architectures", "[" + json_quote(arch) + "]"});
  text("model_type", hf_family_name(family));
  text("torch_dtype", bf16 ? "bfloat16" : "float32");
  integer("vocab_size", mc.vocab_size);
  integer("hidden_size", mc.hidden_size);
  integer("num_attention_heads", mc.num_attention_heads);
  integer("num_key_value_heads", deepseek ? mc.num_attention_heads : mc.kv_heads());
  if (!deepseek) integer("head_dim", mc.head_dim());  // (DeepSeek-V3's config derives its own)
  integer("max_position_embeddings", mc.max_positions());
  flag("tie_word_embeddings", !mc.untie_embeddings_and_output_weights);
  flag("attention_bias", false);
  num("attention_dropout", 0.0);
  if (nemo) {
    integer("num_hidden_layers", int64_t(seq.size()));
    text("hybrid_override_pattern", seq);
    std::string blocks;  // the same as the newer list form (transformers 5 validates these names)
    for (char ch : seq)
      blocks += std::string(blocks.empty() ? "" : ", ") +
                (ch == 'M'   ? "\"linear_attention\""
                 : ch == '*' ? "\"full_attention\""
                 : ch == '-' ? "\"mlp\""
                             : "\"moe\"");
    f.push_back({"layers_block_type", "[" + blocks + "]"});
    integer("num_nextn_predict_layers", 0);
    num("layer_norm_epsilon", mc.norm_epsilon);
    integer("intermediate_size", mc.ffn_size());
    text("mlp_hidden_act", "relu2");
    flag("mlp_bias", false);
    integer("mamba_num_heads", mc.mamba_heads());
    integer("mamba_head_dim", mc.mamba_head_dim);
    integer("ssm_state_size", mc.mamba_state_dim);
    integer("n_groups", mc.mamba_num_groups);
    integer("conv_kernel", 4);
    num("expand", double(mc.mamba_d_inner()) / double(mc.hidden_size));
    integer("chunk_size", mc.mamba_chunk_size);
    flag("use_conv_bias", true);
    flag("mamba_proj_bias", false);
    flag("use_bias", false);
    text("mamba_hidden_act", "silu");
    flag("residual_in_fp32", false);
    flag("rescale_prenorm_residual", false);
    if (mc.num_experts > 0) {
      integer("n_routed_experts", mc.num_experts);
      integer("num_experts_per_tok", mc.moe_router_topk);
      integer("moe_intermediate_size", mc.moe_ffn_size());
      integer("moe_shared_expert_intermediate_size", mc.moe_shared_expert_intermediate_size);
      integer("n_shared_experts", mc.moe_shared_expert_intermediate_size > 0 ? 1 : 0);
      integer("n_group", 1);
      integer("topk_group", 1);
      flag("norm_topk_prob", mc.moe_router_topk > 1);
      num("routed_scaling_factor", mc.moe_router_topk_scaling_factor > 0 ? mc.moe_router_topk_scaling_factor : 1.0);
    }
  } else {
    integer("num_hidden_layers", int64_t(seq.size() / 2));
    num("rms_norm_eps", mc.norm_epsilon);
    num("rope_theta", mc.rotary_base);
    text("hidden_act", "silu");
    integer("intermediate_size", mc.ffn_size());
    flag("mlp_bias", false);
    if (deepseek) {
      if (mc.q_lora_rank > 0)
        integer("q_lora_rank", mc.q_lora_rank);
      else
        f.push_back({"q_lora_rank", "null"});
      integer("kv_lora_rank", mc.kv_lora_rank);
      integer("qk_nope_head_dim", mc.qk_head_dim);
      integer("qk_rope_head_dim", mc.qk_pos_emb_head_dim);
      integer("v_head_dim", mc.v_head_dim);
      flag("rope_interleave", true);
      if (mc.rotary_scaling_factor > 1)
        f.push_back({"rope_scaling", "{\"type\": \"yarn\", \"rope_type\": \"yarn\", \"factor\": " +
                                         exact_number_text(mc.rotary_scaling_factor) +
                                         ", \"original_max_position_embeddings\": 4096, \"beta_fast\": 32, "
                                         "\"beta_slow\": 1, \"mscale\": " +
                                         exact_number_text(mc.mscale) +
                                         ", \"mscale_all_dim\": " + exact_number_text(mc.mscale_all_dim) + "}"});
      integer("n_routed_experts", mc.num_experts);
      integer("num_experts_per_tok", mc.moe_router_topk);
      integer("moe_intermediate_size", mc.moe_ffn_size());
      integer("n_shared_experts", mc.moe_shared_expert_intermediate_size / mc.moe_ffn_size());
      integer("first_k_dense_replace", int64_t(std::count(seq.begin(), seq.end(), '-')));
      integer("moe_layer_freq", 1);
      integer("n_group", std::max<int64_t>(mc.moe_router_num_groups, 1));
      integer("topk_group", std::max<int64_t>(mc.moe_router_group_topk, 1));
      flag("norm_topk_prob", true);
      num("routed_scaling_factor", mc.moe_router_topk_scaling_factor > 0 ? mc.moe_router_topk_scaling_factor : 1.0);
      text("scoring_func", "sigmoid");
      text("topk_method", "noaux_tc");
      integer("num_nextn_predict_layers", plan.mtp_depths);
    }
    if (family == HfFamily::Qwen3Moe) {
      integer("num_experts", mc.num_experts);
      integer("num_experts_per_tok", mc.moe_router_topk);
      integer("moe_intermediate_size", mc.moe_ffn_size());
      flag("norm_topk_prob", !mc.moe_router_pre_softmax);
      integer("decoder_sparse_step", 1);
      std::string dense;
      for (size_t k = 0; 2 * k + 1 < seq.size(); ++k)
        if (seq[2 * k + 1] == '-') dense += (dense.empty() ? "" : ", ") + std::to_string(k);
      f.push_back({"mlp_only_layers", "[" + dense + "]"});
      flag("use_sliding_window", false);
    }
  }
  std::string out = "{\n";
  for (size_t i = 0; i < f.size(); ++i)
    out += "  " + json_quote(f[i].first) + ": " + f[i].second + (i + 1 < f.size() ? ",\n" : "\n");
  return out + "}\n";
}

}  // namespace

namespace {

// DeepSeek-V3 (DeepseekV3ForCausalLM, docs/spec/hf_names.md): MLA layers, the first k with a SwiGLU MLP and the rest
// with a sigmoid-routed MoE (expert bias, shared experts, group limits summing each group's top 2), MTP depths of one
// such MoE layer.
std::vector<std::string> deepseek_export_errors(const ModelConfig& mc, const LayerPlan& plan, const std::string& seq) {
  std::vector<std::string> e;
  bool layers = seq.size() % 2 == 0 && !seq.empty();
  for (size_t i = 0; layers && i < seq.size(); i += 2)
    layers = seq[i] == '+' && (seq[i + 1] == 'E' || (seq[i + 1] == '-' && (i == 0 || seq[i - 1] == '-')));
  if (!layers)
    e.push_back("the pattern '" + seq +
                "': DeepSeek-V3 layers are multi-latent attention + MLP pairs, then + MoE pairs " + "(+-+E+E...)");
  std::string mtp;
  for (const LayerItem& it : plan.mtp_items) mtp += it.symbols;
  if (plan.mtp_depths > 0 && mtp != "+E") e.push_back("the MTP part '" + mtp + "': DeepSeek-V3's is one '+E' layer");
  if (mc.activation != Activation::SwiGLU) e.push_back("the MLP activation: DeepSeek-V3's is SwiGLU (--swiglu)");
  if (!mc.qk_layernorm) e.push_back("DeepSeek-V3 norms its latents (--qk-layernorm)");
  if (mc.norm_epsilon != 1e-6) e.push_back("--norm-epsilon: DeepSeek-V3's latent norms use 1e-6");
  if (mc.position_embedding_type == PositionEmbedding::LearnedAbsolute)
    e.push_back("--position-embedding-type: DeepSeek-V3 has no learned position embedding (rope)");
  if (mc.rotary_scaling_factor > 1 && mc.rope_type == "rope")
    e.push_back("--rope-type rope with --rotary-scaling-factor above 1: no DeepSeek-V3 form (YaRN)");
  if (mc.rotary_scaling_factor > 1 && mc.mscale_all_dim == 0 && mc.mscale != 1)
    e.push_back("--mscale other than 1 with --mscale-all-dim 0: Hugging Face scales RoPE by mscale 1 then");
  if (mc.num_experts == 0) {
    e.push_back("--num-experts: DeepSeek-V3 needs experts");
    return e;
  }
  if (mc.moe_router_score_function != RouterScore::Sigmoid || !mc.moe_router_enable_expert_bias)
    e.push_back(
        "DeepSeek-V3's router is sigmoid with an expert bias (--moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias)");
  if (mc.moe_router_num_groups > 1 && mc.moe_router_topk != 2 * mc.moe_router_group_topk)
    e.push_back(
        "--moe-router-group-topk: DeepSeek-V3 scores each group by its top 2 experts, so --moe-router-topk must "
        "be twice --moe-router-group-topk");
  if (mc.moe_shared_expert_intermediate_size <= 0 || mc.moe_shared_expert_intermediate_size % mc.moe_ffn_size() != 0)
    e.push_back(
        "--moe-shared-expert-intermediate-size: DeepSeek-V3's shared experts are a multiple of "
        "--moe-ffn-hidden-size wide");
  return e;
}

}  // namespace

std::vector<std::string> hf_export_errors(const ModelConfig& mc, const LayerPlan& plan, HfFamily family) {
  std::vector<std::string> e;
  const std::string seq = physical_sequence(plan), name = hf_family_name(family);
  const bool deepseek = family == HfFamily::DeepseekV3;
  if (plan.mtp_depths > 0 && !deepseek)
    e.push_back("--mtp-num-layers: " + name + " has no MTP depths (train without them, or drop them)");
  if (mc.enable_mhc) e.push_back("--enable-mhc-connections: no " + name + " model has hyper-connections");
  if (mc.add_bias_linear) e.push_back("linear biases: " + name + " has none (--disable-bias-linear)");
  if (mc.normalization != NormKind::RMSNorm) e.push_back("--normalization: " + name + " uses RMSNorm");
  if (mc.moe_shared_expert_gate) e.push_back("--moe-shared-expert-gate: no " + name + " form");
  if (mc.moe_mlp_glu_interleave_size > 0) e.push_back("--moe-mlp-glu-interleave-size: no " + name + " form");
  if (mc.glu_linear_offset != 0.0 || mc.activation_func_clamp_value != 0.0)
    e.push_back("--glu-linear-offset / --activation-func-clamp-value: no " + name + " form");
  if (mc.moe_router_num_groups > 1 && !deepseek)
    e.push_back("--moe-router-num-groups: group-limited routing has no " + name + " form here");
  if (family == HfFamily::NemotronH) {
    if (seq.find_first_not_of("M*-E") != std::string::npos)
      e.push_back("the pattern '" + seq + "': NemotronH holds M, *, - and E layers only");
    if (mc.position_embedding_type != PositionEmbedding::None)
      e.push_back("--position-embedding-type: NemotronH has no position embedding (none)");
    if (mc.activation != Activation::SquaredReLU)
      e.push_back("the MLP activation: NemotronH's is squared ReLU (--squared-relu)");
    if (mc.num_experts > 0 &&
        (mc.moe_router_score_function != RouterScore::Sigmoid || !mc.moe_router_enable_expert_bias))
      e.push_back(
          "NemotronH's router is sigmoid with an expert bias (--moe-router-score-function sigmoid "
          "--moe-router-enable-expert-bias)");
    if (mc.qk_layernorm) e.push_back("--qk-layernorm: NemotronH's attention has no q/k norm");
    return e;
  }
  if (deepseek) return deepseek_export_errors(mc, plan, seq);
  bool pairs = seq.size() % 2 == 0;
  for (size_t i = 0; pairs && i < seq.size(); i += 2)
    pairs = seq[i] == '*' && (seq[i + 1] == '-' || (family == HfFamily::Qwen3Moe && seq[i + 1] == 'E'));
  if (!pairs)
    e.push_back("the pattern '" + seq + "': " + name + " layers are attention + " +
                (family == HfFamily::Llama ? "MLP pairs (*-*-...)" : "MLP or MoE pairs (*E*-...)"));
  if (mc.position_embedding_type != PositionEmbedding::Rope || mc.rotary_percent != 1.0 || mc.rotary_interleaved)
    e.push_back("--position-embedding-type: " + name + " uses rope over the whole head, rotating halves");
  if (mc.activation != Activation::SwiGLU) e.push_back("the MLP activation: " + name + "'s is SwiGLU (--swiglu)");
  if (family == HfFamily::Llama && mc.qk_layernorm) e.push_back("--qk-layernorm: Llama's attention has no q/k norm");
  if (family == HfFamily::Qwen3Moe) {
    if (!mc.qk_layernorm) e.push_back("Qwen3's attention norms q and k (--qk-layernorm)");
    if (mc.num_experts == 0) e.push_back("--num-experts: Qwen3-MoE needs experts");
    if (mc.moe_router_score_function != RouterScore::Softmax || mc.moe_router_enable_expert_bias ||
        mc.moe_router_topk_scaling_factor > 0)
      e.push_back("Qwen3-MoE's router is a plain softmax (no sigmoid, expert bias or top-k scaling)");
    if (mc.moe_shared_expert_intermediate_size > 0) e.push_back("Qwen3-MoE has no shared experts");
  }
  return e;
}

HfFamily hf_family_for(const ModelConfig& mc, const LayerPlan& plan) {
  const std::string seq = physical_sequence(plan);
  if (seq.find('+') != std::string::npos) return HfFamily::DeepseekV3;
  if (seq.find('M') != std::string::npos || mc.moe_router_score_function == RouterScore::Sigmoid ||
      mc.position_embedding_type == PositionEmbedding::None)
    return HfFamily::NemotronH;
  return mc.num_experts > 0 ? HfFamily::Qwen3Moe : HfFamily::Llama;
}

void export_hf(const ModelConfig& mc, const LayerPlan& plan, const std::map<std::string, HostTensor>& weights,
               HfFamily family, const std::string& out_dir, const HfExportOptions& opt) {
  {
    const std::vector<std::string> errors = hf_export_errors(mc, plan, family);
    std::string text;
    for (const std::string& m : errors) text += "\n  " + m;
    HYTRA_CHECK(errors.empty(), "hytra convert --to-hf: the model has no ", hf_family_name(family), " form:", text);
  }
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "OUT/"
  HYTRA_CHECK(!out.empty() && !fs::exists(out), "--to-hf ", out_dir, ": exists already (give a new folder)");
  HYTRA_CHECK(opt.max_shard_bytes > 0, "--hf-max-shard-size: expected a positive byte count, got ",
              opt.max_shard_bytes);
  auto get = [&](const std::string& k) -> const HostTensor& {
    const auto it = weights.find(k);
    HYTRA_CHECK(it != weights.end(), "hytra convert: the checkpoint has no tensor '", k, "'");
    return it->second;
  };
  const QkvLayout qkv{mc.num_attention_heads, mc.kv_heads(), mc.head_dim()};
  std::vector<SafetensorsTensor> tensors;
  for (const Rule& r : rules_for(mc, plan, family)) {
    const HostTensor& t = get(r.hytra);
    const bool bf16 = opt.bf16 && !r.keep_fp32;
    switch (r.kind) {
      case Rule::Copy: tensors.push_back(to_file(r.hf[0], t, bf16)); break;
      case Rule::VocabRows: tensors.push_back(to_file(r.hf[0], rows(t, 0, mc.vocab_size), bf16)); break;
      case Rule::Qkv: {
        const std::vector<HostTensor> parts = split_qkv(t, qkv);
        for (int i = 0; i < 3; ++i) tensors.push_back(to_file(r.hf[size_t(i)], parts[size_t(i)], bf16));
        break;
      }
      case Rule::Glu: {
        const int64_t f = t.shape[0] / 2;
        tensors.push_back(to_file(r.hf[0], rows(t, 0, f), bf16));
        tensors.push_back(to_file(r.hf[1], rows(t, f, f), bf16));
        break;
      }
    }
  }
  // Shards of at most max_shard_bytes (a tensor larger than that alone in its shard), in name order.
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::vector<SafetensorsTensor>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (SafetensorsTensor& t : tensors) {
    const int64_t n = int64_t(t.bytes.size());
    if (in_shard > 0 && in_shard + n > opt.max_shard_bytes) shards.emplace_back(), in_shard = 0;
    in_shard += n;
    total += n;
    shards.back().push_back(std::move(t));
  }
  // Written beside OUT under a temporary name, renamed when complete; removed if anything fails.
  const std::string tmp = out.string() + ".tmp-" + std::to_string(getpid());
  fs::remove_all(tmp);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  HYTRA_CHECK(!ec, "--to-hf ", out_dir, ": cannot create ", tmp, " (", ec.message(), ")");
  struct RemoveUnlessKept {
    std::string path;
    bool keep = false;
    ~RemoveUnlessKept() {
      std::error_code e;
      if (!keep) fs::remove_all(path, e);
    }
  } guard{tmp};
  write_file_atomic(tmp + "/config.json", config_json(mc, plan, family, opt.bf16));
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors(tmp + "/model.safetensors", std::move(shards[0]), meta);
  } else {
    std::string map;
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      for (const SafetensorsTensor& t : shards[i])
        map += (map.empty() ? "" : ",\n") + std::string("    ") + json_quote(t.name) + ": " + json_quote(name);
      write_safetensors(tmp + "/" + name, std::move(shards[i]), meta);
    }
    write_file_atomic(tmp + "/model.safetensors.index.json",
                      "{\n  \"metadata\": {\"total_size\": " + std::to_string(total) + "},\n  \"weight_map\": {\n" +
                          map + "\n  }\n}\n");
  }
  fs::rename(tmp, out, ec);
  HYTRA_CHECK(!ec, "--to-hf ", out_dir, ": cannot rename ", tmp, " to it (", ec.message(), ")");
  guard.keep = true;
  fsync_directory(fs::absolute(out).parent_path().string());
}

namespace {

// config.json field access with errors naming the file and key.
struct HfConfig {
  Json j;
  std::string path;
  const Json* find(const char* k) const { return j.find(k); }
  int64_t integer(const char* k) const {
    const Json* v = j.find(k);
    HYTRA_CHECK(v != nullptr, path, ": missing key '", k, "'");
    return v->as_int(k);
  }
  int64_t integer_or(const char* k, int64_t d) const { return j.find(k) && !j.at(k).is_null() ? integer(k) : d; }
  double number_or(const char* k, double d) const {
    const Json* v = j.find(k);
    return v && !v->is_null() ? v->as_number(k) : d;
  }
  bool flag_or(const char* k, bool d) const {
    const Json* v = j.find(k);
    return v && !v->is_null() ? v->as_bool(k) : d;
  }
  std::string text_or(const char* k, const std::string& d) const {
    const Json* v = j.find(k);
    return v && !v->is_null() ? v->as_string(k) : d;
  }
};

std::string num_text(double v) { return exact_number_text(v); }

// DeepSeek-V3's config.json as hytra flags beyond the common ones (docs/spec/hf_names.md): the pattern from
// first_k_dense_replace and num_nextn_predict_layers, MLA's sizes, YaRN from rope_scaling, the MoE router.
void read_deepseek_config(const HfConfig& c, int64_t layers, std::vector<std::string>& f) {
  auto add = [&](std::initializer_list<std::string> v) { f.insert(f.end(), v); };
  const int64_t dense = c.integer_or("first_k_dense_replace", 0), mtp = c.integer_or("num_nextn_predict_layers", 0);
  HYTRA_CHECK(dense >= 0 && dense <= layers && mtp >= 0 && mtp <= 16, c.path,
              ": first_k_dense_replace / num_nextn_predict_layers: expected 0..num_hidden_layers and 0..16, got ",
              dense, " and ", mtp);
  HYTRA_CHECK(c.integer_or("moe_layer_freq", 1) == 1, c.path, ": moe_layer_freq: hytra converts 1");
  HYTRA_CHECK(c.text_or("scoring_func", "sigmoid") == "sigmoid" && c.text_or("topk_method", "noaux_tc") == "noaux_tc" &&
                  c.flag_or("norm_topk_prob", true),
              c.path, ": scoring_func / topk_method / norm_topk_prob: hytra converts sigmoid, noaux_tc and true");
  HYTRA_CHECK(c.flag_or("rope_interleave", true), c.path, ": rope_interleave: hytra converts true");
  std::string pattern;
  for (int64_t k = 0; k < layers; ++k) pattern += k < dense ? "[+-]" : "[+E]";
  for (int64_t d = 0; d < mtp; ++d) pattern += "/+E";
  const int64_t moe_ffn = c.integer("moe_intermediate_size");
  add({"--hybrid-layer-pattern",
       pattern,
       "--qk-layernorm",
       "--kv-lora-rank",
       std::to_string(c.integer("kv_lora_rank")),
       "--qk-head-dim",
       std::to_string(c.integer("qk_nope_head_dim")),
       "--qk-pos-emb-head-dim",
       std::to_string(c.integer("qk_rope_head_dim")),
       "--v-head-dim",
       std::to_string(c.integer("v_head_dim")),
       "--num-experts",
       std::to_string(c.integer("n_routed_experts")),
       "--moe-router-topk",
       std::to_string(c.integer("num_experts_per_tok")),
       "--moe-ffn-hidden-size",
       std::to_string(moe_ffn),
       "--moe-shared-expert-intermediate-size",
       std::to_string(moe_ffn * c.integer_or("n_shared_experts", 1)),
       "--moe-router-score-function",
       "sigmoid",
       "--moe-router-enable-expert-bias"});
  if (const int64_t rq = c.integer_or("q_lora_rank", 0); rq > 0) add({"--q-lora-rank", std::to_string(rq)});
  const double scale = c.number_or("routed_scaling_factor", 1.0);
  if (scale != 1.0) add({"--moe-router-topk-scaling-factor", num_text(scale)});
  if (const int64_t groups = c.integer_or("n_group", 1); groups > 1)
    add({"--moe-router-num-groups", std::to_string(groups), "--moe-router-group-topk",
         std::to_string(c.integer("topk_group"))});
  const Json* rs = c.find("rope_scaling");
  if (rs != nullptr && !rs->is_null()) {
    const HfConfig y{*rs, c.path + " rope_scaling"};
    const std::string type = y.text_or("rope_type", y.text_or("type", ""));
    HYTRA_CHECK(type == "yarn" && y.number_or("original_max_position_embeddings", 4096) == 4096 &&
                    y.number_or("beta_fast", 32) == 32 && y.number_or("beta_slow", 1) == 1,
                y.path, ": hytra converts YaRN with original_max_position_embeddings 4096, beta_fast 32, beta_slow 1");
    add({"--rotary-scaling-factor", num_text(y.number_or("factor", 1.0)), "--mscale",
         num_text(y.number_or("mscale", 1.0)), "--mscale-all-dim", num_text(y.number_or("mscale_all_dim", 0.0))});
  }
}

}  // namespace

HfModelFlags read_hf_config(const std::string& dir) {
  HfConfig c{Json::parse_file(dir + "/config.json"), dir + "/config.json"};
  const std::string type = c.text_or("model_type", "");
  HfModelFlags out;
  if (type == "llama")
    out.family = HfFamily::Llama;
  else if (type == "qwen3_moe")
    out.family = HfFamily::Qwen3Moe;
  else if (type == "nemotron_h")
    out.family = HfFamily::NemotronH;
  else if (type == "deepseek_v3")
    out.family = HfFamily::DeepseekV3;
  else
    fail(str(c.path, ": model_type '", type, "': hytra converts llama, qwen3_moe, nemotron_h and deepseek_v3"));
  std::vector<std::string>& f = out.flags;
  auto add = [&](std::initializer_list<std::string> v) { f.insert(f.end(), v); };
  const int64_t heads = c.integer("num_attention_heads");
  const int64_t hidden = c.integer("hidden_size");
  HYTRA_CHECK(heads > 0 && hidden > 0, c.path, ": num_attention_heads and hidden_size: expected positive counts, got ",
              heads, " and ", hidden);
  add({"--hidden-size", std::to_string(hidden), "--num-attention-heads", std::to_string(heads),
       "--group-query-attention", "--num-query-groups", std::to_string(c.integer_or("num_key_value_heads", heads)),
       "--kv-channels", std::to_string(c.integer_or("head_dim", hidden / heads)), "--vocab-size",
       std::to_string(c.integer("vocab_size")), "--normalization", "RMSNorm", "--disable-bias-linear",
       "--ffn-hidden-size", std::to_string(c.integer("intermediate_size"))});
  if (const int64_t p = c.integer_or("max_position_embeddings", 0); p > 0)
    add({"--max-position-embeddings", std::to_string(p)});
  if (!c.flag_or("tie_word_embeddings", false)) add({"--untie-embeddings-and-output-weights"});
  HYTRA_CHECK(!c.flag_or("attention_bias", false) && !c.flag_or("mlp_bias", false), c.path,
              ": attention_bias / mlp_bias: hytra's converted models have no linear biases");
  if (out.family == HfFamily::NemotronH) {
    std::string pattern = c.text_or("hybrid_override_pattern", "");
    if (pattern.empty() && c.find("layers_block_type")) {  // the newer list form
      for (const Json& b : c.j.at("layers_block_type").as_array("layers_block_type")) {
        const std::string& k = b.as_string("layers_block_type");
        pattern += k == "mamba" || k == "linear_attention"     ? 'M'
                   : k == "attention" || k == "full_attention" ? '*'
                   : k == "mlp"                                ? '-'
                   : k == "moe"                                ? 'E'
                                                               : '?';
      }
    }
    HYTRA_CHECK(!pattern.empty() && pattern.find_first_not_of("M*-E") == std::string::npos, c.path,
                ": hybrid_override_pattern / layers_block_type: expected M, *, - and E blocks, got '", pattern, "'");
    HYTRA_CHECK(c.text_or("mlp_hidden_act", "relu2") == "relu2", c.path, ": mlp_hidden_act: hytra converts relu2");
    add({"--hybrid-layer-pattern", pattern, "--norm-epsilon", num_text(c.number_or("layer_norm_epsilon", 1e-5)),
         "--squared-relu", "--position-embedding-type", "none", "--mamba-num-heads",
         std::to_string(c.integer("mamba_num_heads")), "--mamba-head-dim", std::to_string(c.integer("mamba_head_dim")),
         "--mamba-state-dim", std::to_string(c.integer("ssm_state_size")), "--mamba-num-groups",
         std::to_string(c.integer_or("n_groups", c.integer_or("mamba_n_groups", 8))), "--mamba-chunk-size",
         std::to_string(c.integer_or("chunk_size", 128))});
    HYTRA_CHECK(c.integer_or("conv_kernel", 4) == 4, c.path, ": conv_kernel: hytra's Mamba convolution is 4 wide");
    if (pattern.find('E') != std::string::npos) {
      add({"--num-experts", std::to_string(c.integer("n_routed_experts")), "--moe-router-topk",
           std::to_string(c.integer("num_experts_per_tok")), "--moe-ffn-hidden-size",
           std::to_string(c.integer("moe_intermediate_size")), "--moe-router-score-function", "sigmoid",
           "--moe-router-enable-expert-bias"});
      const double scale = c.number_or("routed_scaling_factor", 1.0);
      if (scale != 1.0) add({"--moe-router-topk-scaling-factor", num_text(scale)});
      if (const int64_t s = c.integer_or("moe_shared_expert_intermediate_size", 0);
          s > 0 && c.integer_or("n_shared_experts", 1) > 0)
        add({"--moe-shared-expert-intermediate-size", std::to_string(s)});
      HYTRA_CHECK(c.integer_or("n_group", 1) == 1, c.path, ": n_group: group-limited routing is not converted");
    }
    return out;
  }
  const int64_t layers = c.integer("num_hidden_layers");
  HYTRA_CHECK(layers > 0, c.path, ": num_hidden_layers: expected a positive count");
  HYTRA_CHECK(c.text_or("hidden_act", "silu") == "silu", c.path, ": hidden_act: hytra converts silu (SwiGLU)");
  add({"--swiglu", "--position-embedding-type", "rope", "--rotary-base", num_text(c.number_or("rope_theta", 10000.0)),
       "--norm-epsilon", num_text(c.number_or("rms_norm_eps", 1e-6))});
  if (out.family == HfFamily::DeepseekV3) {
    read_deepseek_config(c, layers, f);
    return out;
  }
  const Json* scaling = c.find("rope_scaling");
  HYTRA_CHECK(scaling == nullptr || scaling->is_null(), c.path, ": rope_scaling: not converted (plain RoPE only)");
  if (out.family == HfFamily::Llama) {
    add({"--num-layers", std::to_string(layers)});  // a GPT stack: one [*-] layer each
    return out;
  }
  std::set<int64_t> dense;
  if (const Json* m = c.find("mlp_only_layers"))
    for (const Json& v : m->as_array("mlp_only_layers")) dense.insert(v.as_int("mlp_only_layers"));
  const int64_t step = c.integer_or("decoder_sparse_step", 1);
  std::string pattern;
  for (int64_t k = 0; k < layers; ++k) pattern += !dense.count(k) && step > 0 && (k + 1) % step == 0 ? "[*E]" : "[*-]";
  add({"--hybrid-layer-pattern", pattern, "--qk-layernorm", "--num-experts", std::to_string(c.integer("num_experts")),
       "--moe-router-topk", std::to_string(c.integer("num_experts_per_tok")), "--moe-ffn-hidden-size",
       std::to_string(c.integer("moe_intermediate_size"))});
  if (!c.flag_or("norm_topk_prob", false)) add({"--moe-router-pre-softmax"});
  return out;
}

std::map<std::string, HostTensor> import_hf_weights(const std::string& dir, const ModelConfig& mc,
                                                    const LayerPlan& plan, HfFamily family) {
  // The files: one model.safetensors, or the shards an index names.
  std::vector<std::string> files;
  if (fs::exists(dir + "/model.safetensors.index.json")) {
    const Json idx = Json::parse_file(dir + "/model.safetensors.index.json");
    std::set<std::string> names;
    for (const auto& [k, v] : idx.at("weight_map").as_object("weight_map")) {
      const std::string& file = v.as_string("weight_map");
      HYTRA_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", dir,
                  "/model.safetensors.index.json: '", file, "' is not a plain file name in the folder");
      names.insert(file);
    }
    files.assign(names.begin(), names.end());
  } else {
    files.push_back("model.safetensors");
  }
  std::vector<std::unique_ptr<SafetensorsFile>> open;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> entries;
  for (const std::string& name : files) {
    open.push_back(std::make_unique<SafetensorsFile>(dir + "/" + name));
    for (const SafetensorsEntry& e : open.back()->entries()) {
      HYTRA_CHECK(!entries.count(e.name), dir, ": tensor '", e.name, "' appears in two files");
      entries[e.name] = {open.back().get(), &e};
    }
  }
  std::set<std::string> used;
  auto read = [&](const std::string& name) {
    const auto it = entries.find(name);
    HYTRA_CHECK(it != entries.end(), dir, ": missing tensor '", name, "'");
    const SafetensorsEntry& e = *it->second.second;
    HYTRA_CHECK(decodable_float(e.dtype), dir, ": tensor '", name, "' is ", e.dtype, ", expected F32, BF16 or F16");
    HostTensor t{e.shape, std::vector<float>(size_t(numel(e.shape)))};
    decode_f32(e.dtype, it->second.first->data(e), numel(e.shape), t.values.data());
    used.insert(name);
    return t;
  };
  const QkvLayout qkv{mc.num_attention_heads, mc.kv_heads(), mc.head_dim()};
  // A tensor's shape before any layout transform reads its rows (the others are checked against the model's).
  auto expect = [&](const std::string& name, const HostTensor& t, std::vector<int64_t> shape) {
    HYTRA_CHECK(t.shape == shape, dir, ": tensor '", name, "' is ", shape_str(t.shape), ", the model expects ",
                shape_str(shape));
  };
  const int64_t C = mc.hidden_size;
  std::map<std::string, HostTensor> out;
  for (const Rule& r : rules_for(mc, plan, family)) {
    switch (r.kind) {
      case Rule::Copy: out[r.hytra] = read(r.hf[0]); break;
      case Rule::VocabRows: {  // zero rows up to the padded vocabulary
        HostTensor t = read(r.hf[0]);
        expect(r.hf[0], t, {mc.vocab_size, C});
        const int64_t pad = mc.padded_vocab_size() - mc.vocab_size;
        t.values.resize(t.values.size() + size_t(pad * (numel(t.shape) / t.shape[0])), 0.0f);
        t.shape[0] += pad;
        // DeepSeek-V3's MTP layers carry copies of the embedding and LM head: they must equal them.
        HYTRA_CHECK(!out.count(r.hytra) || out[r.hytra].values == t.values, dir, ": tensor '", r.hf[0],
                    "' differs from the model's ", r.hytra, " (its copy)");
        out[r.hytra] = std::move(t);
        break;
      }
      case Rule::Qkv: {
        const HostTensor q = read(r.hf[0]), k = read(r.hf[1]), v = read(r.hf[2]);
        expect(r.hf[0], q, {qkv.heads * qkv.dim, C});
        expect(r.hf[1], k, {qkv.groups * qkv.dim, C});
        expect(r.hf[2], v, {qkv.groups * qkv.dim, C});
        out[r.hytra] = fuse_qkv({&q, &k, &v}, qkv);
        break;
      }
      case Rule::Glu: {
        HostTensor g = read(r.hf[0]);
        const HostTensor u = read(r.hf[1]);
        HYTRA_CHECK(g.shape.size() == 2 && g.shape[0] > 0 && u.shape == g.shape, dir, ": tensors '", r.hf[0], "' ",
                    shape_str(g.shape), " and '", r.hf[1], "' ", shape_str(u.shape),
                    ": expected two matrices of one shape (the GLU's gate and up)");
        append_rows(g, u);
        out[r.hytra] = std::move(g);
        break;
      }
    }
  }
  if (!mc.untie_embeddings_and_output_weights && entries.count("lm_head.weight")) used.insert("lm_head.weight");
  std::string left;
  for (const auto& [name, e] : entries)
    if (!used.count(name)) left += "\n  " + name;
  HYTRA_CHECK(left.empty(), dir, ": tensors hytra's ", hf_family_name(family), " model has no place for:", left);
  return out;
}

}  // namespace hytra
