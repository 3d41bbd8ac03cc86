// Which sub-layers activation recompute covers (docs/spec/recompute.md, docs/spec/mhc.md §6): the
// units of the stack loop (full recompute: chunks of --recompute-num-layers logical layers, uniform,
// or the first ones, block; every other sub-layer a unit of its own), the bodies selective recompute
// reruns, and the selective-"mhc" blocks.
#pragma once
#include <cstddef>
#include <vector>

#include "model/config.h"
#include "model/layer_plan.h"

namespace hytra {

struct RecomputePlan {
  struct Unit {
    size_t begin, end;  // sub-layer range
    bool recompute;     // full recompute: keeps only its input, reruns its layers in backward
  };
  std::vector<Unit> units;            // a partition of the sub-layers, in order
  std::vector<bool> selective_body;   // per sub-layer: its body is rerun (plain stack)
  std::vector<bool> mhc_block_start;  // per sub-layer: starts a selective-"mhc" block (empty: none)
};

// For the L sub-layers of `plan` (physical order).
RecomputePlan plan_recompute(const ModelConfig& cfg, const LayerPlan& plan, size_t L);

}  // namespace hytra
