// `hytra convert`'s library part (tools/cmd_convert.cpp parses its flags; src/interop/hf_convert.h does the work):
// a hytra checkpoint out to a Hugging Face folder, a Hugging Face folder in as a hytra checkpoint, and Megatron's own
// parameters (a safetensors file tools/megatron_checkpoint.py writes from torch_dist or torch checkpoints) in.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "interop/hf_convert.h"
#include "model/config.h"
#include "train/train_config.h"

namespace hytra {

// The checkpoint `tc.load` of the model `mc` (the flags it was trained with) written as `family` (default: the
// family the model fits) into the new folder `out_dir`. Returns the family written.
HfFamily convert_to_hf(const ModelConfig& mc, const TrainConfig& tc, const std::string& out_dir,
                       std::optional<HfFamily> family, const HfExportOptions& opt);

struct HfImport {
  HfFamily family = HfFamily::Llama;
  std::vector<std::string> model_flags;  // what `hytra train` needs to build the model
  std::string checkpoint;                // the iteration directory written
};
// The folder `hf_dir` as a hytra checkpoint (iteration 0, weights only: train on it with --load SAVE --finetune)
// under `save_dir`.
HfImport convert_from_hf(const std::string& hf_dir, const std::string& save_dir);

// The safetensors file `file` of Megatron parameter names as a checkpoint of the model `mc` (the flags the Megatron
// run was launched with; every parameter must be filled, per tc.ckpt_strictness for extra tensors) under
// `save_dir`: iteration 0, weights only. Returns the iteration directory written.
std::string convert_from_megatron(const ModelConfig& mc, const TrainConfig& tc, const std::string& file,
                                  const std::string& save_dir);

}  // namespace hytra
