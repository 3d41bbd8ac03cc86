#include "model/model_plan.h"

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/layer_kinds.h"
#include "model/pattern.h"

namespace hytra {

LayerPlan plan_for(const ModelConfig& cfg, int64_t pipeline_size, int64_t pipeline_rank, int64_t virtual_stage) {
  PlanOptions o;
  if (!cfg.hybrid_layer_pattern.empty()) {
    o.pattern = cfg.hybrid_layer_pattern;
  } else if (cfg.hybrid_attention_ratio == 0.0 && cfg.hybrid_mlp_ratio == 0.0) {
    // No pattern and no ratios: a GPT stack, one `[*-]` transformer layer per --num-layers.
    HYTRA_CHECK(cfg.num_layers > 0,
                "--hybrid-layer-pattern: give a pattern, the hybrid ratios, or --num-layers for a GPT stack");
    // --mtp-num-layers D on a GPT stack: each depth's inner layer is one attention + MLP pair.
    std::string p;
    for (int64_t i = 0; i < cfg.num_layers; ++i) p += "[*-]";
    for (int64_t d = 0; d < cfg.mtp_num_layers; ++d) p += "/*-";
    o.pattern = p;
  }
  if (cfg.num_layers > 0) o.num_layers = cfg.num_layers;
  if (cfg.mtp_num_layers > 0) o.mtp_num_layers = cfg.mtp_num_layers;
  o.hybrid_attention_ratio = cfg.hybrid_attention_ratio;
  o.hybrid_mlp_ratio = cfg.hybrid_mlp_ratio;
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
