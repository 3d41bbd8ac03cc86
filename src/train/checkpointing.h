// Saving and resuming training state through checkpoint/checkpoint.h: parameters by canonical key,
// AdamW moments, the optimizer step, the iteration and the data positions (consumed training and
// validation samples), so a resumed run continues bit for bit.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "nn/param.h"
#include "train/adamw.h"
#include "train/train_config.h"

namespace hytra {

struct ResumePoint {
  int64_t iteration = 0;               // last completed iteration
  int64_t consumed_samples = 0;        // training samples consumed
  int64_t consumed_valid_samples = 0;  // validation samples consumed
  bool optimizer_loaded = false;       // load_training_state filled the optimizer state
};

// One parameter's part of a checkpoint: its canonical name, fp32 value and Adam moments.
struct ParamState {
  std::string name;
  Tensor value, exp_avg, exp_avg_sq;
};
std::vector<ParamState> param_states(ParamStore& params, const OptimizerState& opt);

// config_text: the run's configuration (the manifest's `config`, for people reading the checkpoint);
// arch: the resolved model configuration the manifest records for --load to compare. `params`: the whole
// model's, in its parameter order (a pipeline's stages gathered one after the other).
void save_training_state(const TrainConfig& tc, const std::vector<ParamState>& params, int64_t optimizer_step,
                         const ResumePoint& at, const std::string& config_text,
                         const std::vector<ArchitectureEntry>& arch);
// Loads --load per the flags (weights always; optimizer unless --no-load-optim or --finetune).
// First compares the checkpoint's recorded model configuration with `arch` (Megatron's
// check_checkpoint_args): a difference in an entry that defines the weights is an error; other
// differences are errors under --ckpt-strictness raise_*, warnings otherwise, ignored with --finetune.
// Every parameter must be present with its shape (per --ckpt-strictness), and tensors holding NaN
// or Inf are refused unless --ckpt-allow-non-finite. The optimizer's moments are read into `opt`'s tensors
// and its step count set (then ResumePoint::optimizer_loaded).
// `elsewhere`: the canonical names of the other pipeline stages' parameters (in the file, not loaded here).
ResumePoint load_training_state(const TrainConfig& tc, ParamStore& params, OptimizerState& opt,
                                const std::vector<ArchitectureEntry>& arch,
                                const std::set<std::string>& elsewhere = {});

// Fills every parameter (one process, unsharded) from a bare safetensors file of Megatron's names, through the
// same name rules as a checkpoint (aliases, layouts, expert forms: checkpoint/key_map.h) and `strictness`; NaN or
// Inf values are refused. A file with no manifest: `hytra convert --from-megatron`'s input.
void load_weights_file(const std::string& path, ParamStore& params, Strictness strictness);

}  // namespace hytra
