#include "model/model_plan.h"

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/layer_kinds.h"
#include "model/pattern.h"

namespace hytra {

std::vector<bool> moe_layers_of(const std::string& freq, int64_t num_layers) {
  const std::string flag = "--moe-layer-freq";
  if (freq.empty()) return std::vector<bool>(size_t(num_layers), true);
  std::string t;  // without spaces and one pair of outer parentheses
  for (char ch : freq)
    if (ch != ' ') t += ch;
  if (t.size() >= 2 && t.front() == '(' && t.back() == ')') t = t.substr(1, t.size() - 2);
  std::vector<bool> out;
  static const std::regex integer("[0-9]{1,9}");
  if (std::regex_match(t, integer)) {
    const int64_t n = std::stoll(t);
    HYTRA_CHECK(n >= 1, flag, ": expected a positive integer, got ", n);
    for (int64_t i = 0; i < num_layers; ++i) out.push_back(i % n == 0);
  } else {
    // A sum of lists, each "[a,b,...]" or "[a]*n" (Megatron evaluates the Python expression; these are its forms).
    static const std::regex term("\\[([01](?:,[01])*)\\](?:\\*([0-9]{1,9}))?");
    size_t at = 0;
    while (at < t.size()) {
      std::smatch m;
      const std::string rest = t.substr(at);
      HYTRA_CHECK(std::regex_search(rest, m, term, std::regex_constants::match_continuous), flag,
                  ": expected an integer or a list of 0/1 per layer such as \"[1,0,1]\" or \"([0]*3+[1]*9)\", got '",
                  freq, "'");
      std::vector<bool> list;
      for (char ch : m[1].str())
        if (ch != ',') list.push_back(ch == '1');
      const int64_t times = m[2].matched ? std::stoll(m[2].str()) : 1;
      for (int64_t k = 0; k < times && int64_t(out.size()) <= num_layers; ++k)
        out.insert(out.end(), list.begin(), list.end());
      at += size_t(m.length(0));
      if (at < t.size()) {
        HYTRA_CHECK(t[at] == '+', flag, ": expected '+' between the lists, got '", freq, "'");
        ++at;
      }
    }
    HYTRA_CHECK(int64_t(out.size()) == num_layers, flag, ": lists ", out.size(), " layers, --num-layers is ",
                num_layers);
  }
  return out;
}

LayerPlan plan_for(const ModelConfig& cfg, int64_t pipeline_size, int64_t pipeline_rank, int64_t virtual_stage) {
  PlanOptions o;
  const bool ratios = cfg.hybrid_attention_ratio.has_value() || cfg.hybrid_mlp_ratio.has_value();
  const bool gpt = cfg.hybrid_layer_pattern.empty() && !ratios;
  HYTRA_CHECK(gpt || !cfg.multi_latent_attention || cfg.hybrid_layer_pattern.find('*') == std::string::npos,
              "--multi-latent-attention: a pattern writes its multi-latent attention layers as '+' (its '*' layers are "
              "standard attention, and Megatron allows no mix of the two)");
  HYTRA_CHECK(gpt || cfg.moe_layer_freq.empty(),
              "--moe-layer-freq: only for GPT stacks (without --hybrid-layer-pattern or the ratios): a pattern's E "
              "symbols place its MoE layers");
  if (!cfg.hybrid_layer_pattern.empty()) {
    o.pattern = cfg.hybrid_layer_pattern;
  } else if (gpt) {
    // No pattern and no ratios: a GPT stack, one `[*-]` transformer layer per --num-layers (Megatron's GPTModel),
    // `[*E]` for its MoE layers (--num-experts; --moe-layer-freq picks them, every layer by default).
    HYTRA_CHECK(cfg.num_layers > 0,
                "--hybrid-layer-pattern: give a pattern, the hybrid ratios, or --num-layers for a GPT stack");
    // With --multi-latent-attention the attention is MLA: `[+-]`, `[+E]`.
    const std::vector<bool> moe = moe_layers_of(cfg.moe_layer_freq, cfg.num_layers);
    const std::string a(1, cfg.multi_latent_attention ? '+' : '*');
    std::string p;
    for (int64_t i = 0; i < cfg.num_layers; ++i) p += "[" + a + (cfg.num_experts > 0 && moe[size_t(i)] ? "E]" : "-]");
    // --mtp-num-layers D: each depth's inner layer is one attention + MLP (or MoE, as the last layer) pair.
    const bool moe_mtp = cfg.num_experts > 0 && moe.back();
    for (int64_t d = 0; d < cfg.mtp_num_layers; ++d) p += "/" + a + (moe_mtp ? "E" : "-");
    o.pattern = p;
  }
  // (A GPT stack's --num-layers counts its `[*-]` groups, which its pattern has by construction.)
  if (cfg.num_layers > 0 && !gpt) o.num_layers = cfg.num_layers;
  if (cfg.mtp_num_layers > 0) o.mtp_num_layers = cfg.mtp_num_layers;
  o.ratios_given = ratios;
  o.hybrid_attention_ratio = cfg.hybrid_attention_ratio.value_or(0.0);
  o.hybrid_mlp_ratio = cfg.hybrid_mlp_ratio.value_or(0.0);
  if (pipeline_size > 1) {
    o.pipeline_size = pipeline_size;
    o.pipeline_rank = pipeline_rank;
    if (virtual_stage > 0) o.virtual_stage = virtual_stage;
    if (cfg.decoder_first_pipeline_num_layers > 0) o.first_stage_layers = cfg.decoder_first_pipeline_num_layers;
    if (cfg.decoder_last_pipeline_num_layers > 0) o.last_stage_layers = cfg.decoder_last_pipeline_num_layers;
  }
  return build_layer_plan(o);
}

void check_plan(const ModelConfig& cfg, const LayerPlan& plan, std::vector<std::string>& errors) {
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) errors.push_back(msg);
  };
  std::set<char> symbols;  // of the main pattern and the MTP part
  for (const auto* items : {&plan.items, &plan.mtp_items})
    for (const LayerItem& item : *items) symbols.insert(item.symbols.begin(), item.symbols.end());
  for (char c : symbols) {
    const LayerKind& kind = layer_kind(c);
    need(kind.build != nullptr,
         str("--hybrid-layer-pattern: layer symbol '", c, "' (", kind.name, ") is not built yet in hytra"));
    if (kind.check) kind.check(cfg, errors);
  }
  need(!cfg.recomputes(RecomputeModule::MlaUpProj) || symbols.count('+'),
       "--recompute-modules: 'mla_up_proj' needs multi-latent attention layers ('+')");
  need(plan.mtp_depths == 0 || cfg.position_embedding_type != PositionEmbedding::LearnedAbsolute,
       "--mtp-num-layers: multi-token prediction needs --position-embedding-type rope or none (docs/spec/mtp.md §2)");
  for (const LayerItem& item : plan.items) {
    std::set<std::string> names;  // one hyper-connection key per sub-layer of the group
    for (char c : item.symbols)
      need(!cfg.enable_mhc || names.insert(layer_kind(c).hyper_connection).second,
           str("--enable-mhc-connections: layer group '[", item.symbols,
               "]' holds two sub-layers whose hyper-connections share the key decoder.layers.<i>.",
               layer_kind(c).hyper_connection, " (the mixers M and G, or - and E); split the group"));
  }
  need(cfg.recompute_granularity != RecomputeGranularity::Full || cfg.recompute_num_layers <= plan.num_logical_layers,
       str("--recompute-num-layers: expected at most the model's ", plan.num_logical_layers, " logical layers, got ",
           cfg.recompute_num_layers));
}

}  // namespace hytra
