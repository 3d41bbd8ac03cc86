// TEMP (lead, uncommitted)
#pragma once
#include "model/layer_plan.h"
namespace hytra {
struct PlanOptions {
  std::optional<std::string> pattern;
  std::optional<int64_t> num_layers;
  std::optional<int64_t> mtp_num_layers;
  double hybrid_attention_ratio = 0.0, hybrid_mlp_ratio = 0.0;
  std::optional<int64_t> pipeline_size, pipeline_rank, virtual_stage, first_stage_layers, last_stage_layers;
};
LayerPlan build_layer_plan(const PlanOptions& opt);
}
