// The resolved model configuration a checkpoint records (its manifest's "model" object) and --load
// compares with the run's, as Megatron's check_checkpoint_args does. Each entry is a Megatron flag
// name (without dashes) and its resolved value as text. Entries that `define_weights` change what
// the saved tensors mean (layer sequence, widths, heads, activation, norms, vocabulary, tying, ...):
// a difference there is always an error, even when every tensor shape happens to match. The other
// entries (sequence length, epsilons, routing and balancing options, recompute, ...) follow
// --ckpt-strictness and --finetune (train/checkpointing.h).
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer_plan.h"

namespace hytra {

struct ArchitectureEntry {
  std::string name;   // Megatron flag without dashes, e.g. "num_attention_heads"
  std::string value;  // resolved value as text ("4", "swiglu", "true", "1e-05")
  bool defines_weights = false;
};

std::vector<ArchitectureEntry> architecture_record(const ModelConfig& cfg, const LayerPlan& plan);

// Whether entry `name` of a record defines the weights (also for names from older or newer records).
bool architecture_defines_weights(const std::string& name);

}  // namespace hytra
