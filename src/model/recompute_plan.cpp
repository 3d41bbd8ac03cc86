#include "model/recompute_plan.h"

#include <algorithm>
#include <cmath>

#include "model/layer_kinds.h"

namespace hytra {

RecomputePlan plan_recompute(const ModelConfig& cfg, const LayerPlan& plan, size_t L) {
  RecomputePlan r;
  r.selective_body.assign(L, false);
  std::vector<std::pair<size_t, size_t>> items;  // sub-layer range of each logical layer
  size_t at = 0;
  for (const LayerItem& item : plan.items) {
    items.push_back({at, at + item.symbols.size()});
    at += item.symbols.size();
  }
  // The units partition the sub-layers; full recompute marks some (docs/spec/recompute.md §1-2).
  size_t next = 0;
  if (cfg.recompute_granularity == RecomputeGranularity::Full) {
    const size_t k = size_t(cfg.recompute_num_layers);
    const bool uniform = cfg.recompute_method == RecomputeMethod::Uniform;
    for (size_t first = 0; first < items.size(); first += uniform ? k : 1) {
      if (!uniform && first >= k) break;
      const size_t last = uniform ? std::min(first + k, items.size()) - 1 : first;
      r.units.push_back({items[first].first, items[last].second, true});
      next = items[last].second;
    }
  }
  for (; next < L; ++next) r.units.push_back({next, next + 1, false});
  if (cfg.recompute_granularity == RecomputeGranularity::Selective && cfg.enable_mhc) {
    // Selective "mhc" (docs/spec/mhc.md §6): blocks of --mhc-recompute-layer-num logical layers (a [*-] group is
    // one, as Megatron counts its transformer layers), by default max(1, floor(sqrt(n L / (n + 2)))) for L
    // logical layers (docs/spec/README.md decision 3); a block keeps its input streams and each sub-layer's
    // mappings and output F, and rebuilds the other sub-layers' input streams in backward.
    if (cfg.recomputes(RecomputeModule::Mhc)) {
      const double n = double(cfg.mhc_num_residual_streams), layers = double(items.size());
      const size_t k = cfg.mhc_recompute_layer_num > 0
                           ? size_t(cfg.mhc_recompute_layer_num)
                           : size_t(std::max(1.0, std::floor(std::sqrt(n * layers / (n + 2)))));
      r.mhc_block_start.assign(L, false);
      for (size_t i = 0; i < items.size(); i += k) r.mhc_block_start[items[i].first] = true;
    }
  } else if (cfg.recompute_granularity == RecomputeGranularity::Selective) {  // (mHC: in the wrappers)
    size_t i = 0;
    for (const LayerItem& item : plan.items)
      for (char sym : item.symbols) r.selective_body[i++] = selective_body(cfg, sym);
  }
  return r;
}

}  // namespace hytra
