// Checkpoint directories like Megatron's (SPEC.md B4.2): SAVE/iter_0000100/ holding model.safetensors
// (parameters under their canonical Megatron keys), optimizer.safetensors (Adam moments per
// parameter, `<key>.exp_avg` / `<key>.exp_avg_sq`) and manifest.json (iteration, consumed samples,
// optimizer step, config, hytra version, per-file byte counts and FNV-1a checksums), plus
// SAVE/latest_checkpointed_iteration.txt. A save is atomic: everything is written into a temporary
// directory, fsynced and renamed; the "latest" file is replaced last, so a crash at any moment
// leaves the previous checkpoint loadable.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace hytra {

struct CheckpointManifest {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  int64_t consumed_valid_samples = 0;
  int64_t optimizer_step = 0;
  std::string config;  // the run's flags as JSON text (informational)
};

struct CheckpointContents {
  CheckpointManifest manifest;
  std::vector<SafetensorsTensor> model;      // canonical keys
  std::vector<SafetensorsTensor> optimizer;  // empty: no optimizer state
};

std::string iteration_dir_name(int64_t iteration);  // "iter_0000100"

// Writes SAVE/iter_XXXXXXX atomically and points latest_checkpointed_iteration.txt at it; keeps the
// newest `keep` iteration directories when keep > 0.
void save_checkpoint(const std::string& save_dir, CheckpointContents contents, int64_t keep = 0);

// The directory named by LOAD/latest_checkpointed_iteration.txt (or LOAD itself when it is an
// iteration directory); errors name the file.
std::string resolve_checkpoint_dir(const std::string& load);
CheckpointManifest read_manifest(const std::string& dir);  // verifies the files' sizes and checksums

}  // namespace hytra
