// Saving and resuming training state through checkpoint/checkpoint.h: parameters by canonical key,
// AdamW moments, the optimizer step, the iteration and the data positions (consumed training and
// validation samples), so a resumed run continues bit for bit.
#pragma once
#include <string>

#include "nn/param.h"
#include "train/adamw.h"
#include "train/train_config.h"

namespace hytra {

struct ResumePoint {
  int64_t iteration = 0;               // last completed iteration
  int64_t consumed_samples = 0;        // training samples consumed
  int64_t consumed_valid_samples = 0;  // validation samples consumed
};

// config_text: the run's configuration (the manifest's `config`, for people reading the checkpoint).
void save_training_state(const TrainConfig& tc, ParamStore& params, const AdamW& opt, const ResumePoint& at,
                         const std::string& config_text);
// Loads --load per the flags (weights always; optimizer unless --no-load-optim or --finetune);
// every parameter must be present with its shape, and no unknown key may be left over.
ResumePoint load_training_state(const TrainConfig& tc, ParamStore& params, AdamW& opt);

}  // namespace hytra
