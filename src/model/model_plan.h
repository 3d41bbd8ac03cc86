// The LayerPlan of a model config: from --hybrid-layer-pattern, or the ratios, or (neither) a GPT
// stack of --num-layers `[*-]` groups (`[*E]` for the MoE layers with --num-experts, --moe-layer-freq choosing
// them; MTP depths like the last layer). Throws the pattern's named errors.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer_plan.h"

namespace hytra {

// --moe-layer-freq for a GPT stack of `num_layers` layers: per layer, whether it is MoE (Megatron's semantics: an int
// N marks layers 0, N, 2N, ...; a list names each layer; empty: every layer). Errors name the flag.
std::vector<bool> moe_layers_of(const std::string& freq, int64_t num_layers);

// The configuration's layer plan; with pipeline_size > 1 also the stage of `pipeline_rank` (LayerPlan::stage,
// with --decoder-first/last-pipeline-num-layers), or of its model chunk `virtual_stage` when the pattern's pipes give
// each rank several (segment virtual_stage x pipeline_size + pipeline_rank).
LayerPlan plan_for(const ModelConfig& cfg, int64_t pipeline_size = 1, int64_t pipeline_rank = 0,
                   int64_t virtual_stage = 0);

// The checks that need the plan, as "--flag: ..." messages (ModelConfig::validate calls it): every
// symbol built and its kind's configuration needs (layer_kinds.h), MTP positions, the mHC keys of a
// group, the full-recompute count.
void check_plan(const ModelConfig& cfg, const LayerPlan& plan, std::vector<std::string>& errors);

}  // namespace hytra
