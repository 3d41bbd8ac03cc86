// Hugging Face model folders in and out (hytra convert; docs/spec/hf_names.md, docs/checkpoints.md "Hugging Face"):
// config.json plus safetensors (one file, or shards with model.safetensors.index.json above a size limit) for three
// families: Llama-style dense models (LlamaForCausalLM), Qwen3-MoE (Qwen3MoeForCausalLM: softmax routing, no shared
// experts) and NemotronH (NemotronHForCausalLM: Mamba-2, attention, squared-ReLU MLP and MoE with sigmoid routing,
// expert bias and shared experts). Tensors move between hytra's canonical names and the family's, with the layout
// transforms of hf_names.md §1: the fused QKV split per query group into q/k/v, the GLU fc1 into gate and up, the
// vocabulary padding dropped (export) or added as zero rows (import), per-expert tensors kept per expert.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer_plan.h"

namespace hytra {

enum class HfFamily { Llama, Qwen3Moe, NemotronH, DeepseekV3 };
const char* hf_family_name(HfFamily f);          // "llama", "qwen3_moe", "nemotron_h", "deepseek_v3"
HfFamily hf_family_of(const std::string& name);  // a named error for others

// A whole tensor in fp32 on the host.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Why the model cannot be written as `family` (empty: it can): each a sentence naming the flag.
std::vector<std::string> hf_export_errors(const ModelConfig& mc, const LayerPlan& plan, HfFamily family);
// The family a model fits best (NemotronH for Mamba or MoE-with-sigmoid stacks, Qwen3-MoE for MoE, else Llama).
HfFamily hf_family_for(const ModelConfig& mc, const LayerPlan& plan);

struct HfExportOptions {
  bool bf16 = true;                         // --hf-dtype bf16 (fp32: exact)
  int64_t max_shard_bytes = 5'000'000'000;  // --hf-max-shard-size: above it, shards and an index
};

// Writes `out_dir` (which must not exist yet; written under a temporary name and renamed when complete) from the
// model's whole tensors under hytra's canonical names. Errors name what does not fit.
void export_hf(const ModelConfig& mc, const LayerPlan& plan, const std::map<std::string, HostTensor>& weights,
               HfFamily family, const std::string& out_dir, const HfExportOptions& opt);

// A folder's config.json as hytra flags (the model flags `hytra train` takes; errors name the field) and its family.
struct HfModelFlags {
  HfFamily family = HfFamily::Llama;
  std::vector<std::string> flags;
};
HfModelFlags read_hf_config(const std::string& dir);

// The folder's tensors under hytra's canonical names, in fp32 (F32, BF16 and F16 files), for the model those flags
// build (`mc`, `plan`); a tensor missing, left over or of the wrong shape is a named error.
std::map<std::string, HostTensor> import_hf_weights(const std::string& dir, const ModelConfig& mc,
                                                    const LayerPlan& plan, HfFamily family);

}  // namespace hytra
