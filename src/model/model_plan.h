// The LayerPlan of a model config: from --hybrid-layer-pattern, or the ratios, or (neither) a GPT
// stack of --num-layers `[*-]` groups; with the checks that need the plan (MTP positions, mHC keys of
// a group, the full-recompute count). Throws the pattern's named errors.
#pragma once
#include "model/config.h"
#include "model/layer_plan.h"

namespace hytra {

LayerPlan plan_for(const ModelConfig& cfg);

}  // namespace hytra
