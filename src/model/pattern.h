// The hybrid layer pattern language (docs/spec/pattern.md, with PR #4942's `[...]` groups and docs/spec/README.md decision 1):
// parsing with Megatron's check order and messages, counting, pipeline-segment selection with
// physical and logical offsets, and pattern generation from the deprecated ratios.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/layer_plan.h"

namespace hytra {

// docs/spec/pattern.md §3: (main or none, mtp or none, depths). Throws hytra::Error.
struct ParsedPattern {
  std::optional<std::string> main, mtp;
  int64_t mtp_depths = 0;
};
ParsedPattern parse_hybrid_pattern(const std::optional<std::string>& pattern);

// One pipe-free segment as items ("M", "*-" for [*-], ...); `name` goes into error messages.
std::vector<std::string> parse_segment(const std::string& segment, const std::string& name);

// The most layers --num-layers may ask a generated pattern for (a GPT stack or the ratios): far
// above any real model, low enough that a mistyped count fails at once instead of filling memory.
inline constexpr int64_t kMaxLayers = 65536;

// docs/spec/pattern.md §6 steps 1-2, with Python's round-half-to-even.
std::string pattern_from_ratios(int64_t num_layers, double attention_ratio, double mlp_ratio);

struct PlanOptions {
  std::optional<std::string> pattern;     // --hybrid-layer-pattern
  std::optional<int64_t> num_layers;      // --num-layers
  std::optional<int64_t> mtp_num_layers;  // --mtp-num-layers
  bool ratios_given = false;              // --hybrid-attention-ratio or --hybrid-mlp-ratio given (even as 0)
  double hybrid_attention_ratio = 0.0;    // --hybrid-attention-ratio
  double hybrid_mlp_ratio = 0.0;          // --hybrid-mlp-ratio
  // Pipeline stage to select (docs/spec/pattern.md §5): --pipeline-model-parallel-size, the rank, the virtual
  // stage, --decoder-first/last-pipeline-num-layers.
  std::optional<int64_t> pipeline_size, pipeline_rank, virtual_stage, first_stage_layers, last_stage_layers;
};

// Parses and lays out the pattern (or generates it from the ratios). Warnings (a --num-layers or
// --mtp-num-layers that the pattern overrides) go to `warnings` when given, else to stderr.
LayerPlan build_layer_plan(const PlanOptions& opt, std::vector<std::string>* warnings = nullptr);

}  // namespace hytra
