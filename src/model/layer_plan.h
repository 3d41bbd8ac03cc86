// LayerPlan: what a hybrid layer pattern (docs/pattern.md, docs/spec/pattern.md) describes — the logical
// layers (items: one symbol, or a `[...]` group) with their physical layer numbers and pipeline
// segments, the MTP part, per-symbol counts and, when asked, one pipeline stage's share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hytra {

struct LayerItem {
  std::string symbols;            // "*" or, for the group [*-], "*-"
  std::vector<int64_t> physical;  // 1-based physical layer numbers of the members (consecutive)
  int64_t logical = 0;            // logical index: keys "decoder.layers.<logical>." (docs/spec/names.md §5)
  int64_t segment = 0;            // index of the '|'-segment holding the item
};

struct PipelineStage {
  std::vector<LayerItem> items;  // this stage's items (global numbering kept)
  int64_t physical_offset = 0;   // physical layers before the stage
  int64_t logical_offset = 0;    // logical layers before the stage
  bool first = true, last = true;  // the first / last segment of the pipeline (embeddings / head and MTP)
};

struct LayerPlan {
  std::optional<std::string> main;  // main pattern (pipes kept), as parse_hybrid_pattern returns it
  std::optional<std::string> mtp;   // one MTP depth's pattern
  int64_t mtp_depths = 0;
  int64_t num_layers = 0;           // physical layers of the main pattern
  int64_t num_logical_layers = 0;   // items of the main pattern
  int64_t num_segments = 0;         // '|' count + 1
  std::vector<std::pair<char, int64_t>> layer_counts;  // all 7 symbols, name-sorted; MTP x depths
  std::vector<LayerItem> items;      // the main pattern
  std::vector<LayerItem> mtp_items;  // one MTP depth (physical numbers from 1 within the depth)
  std::optional<PipelineStage> stage;
};

}  // namespace hytra
