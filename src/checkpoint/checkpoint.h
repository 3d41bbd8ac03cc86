// Checkpoint directories like Megatron's (docs/spec/megatron_cli.md §5, docs/checkpoints.md): SAVE/iter_0000100/
// holding model.safetensors (parameters under their canonical Megatron keys), optimizer.safetensors
// (Adam moments per parameter, `<key>.exp_avg` / `<key>.exp_avg_sq`) and manifest.json (iteration,
// consumed samples, optimizer step, the resolved model configuration, hytra version, per-file byte
// counts and XXH3-64 checksums; FNV-1a in checkpoints of older hytra versions, still verified), plus
// SAVE/latest_checkpointed_iteration.txt.
// A save is atomic and durable: every file is written to a temporary name, checked, fsynced and
// renamed (core/atomic_file.h) inside a temporary directory SAVE/iter_XXXXXXX.tmp-PID, which is
// renamed into place; the tracker is replaced last. Any failure removes the temporary directory and
// throws naming the file and the OS error, so the previous checkpoint and tracker stay as they were.
// Temporary directories left by killed saves are removed by the next save into the same SAVE.
// Loading trusts nothing: the manifest must list model.safetensors, list only plain file names, and agree with
// the directory's iteration number; every file a load reads must be listed and verified (size and checksum).
// Listed files that are missing and .safetensors files it does not list are errors under --ckpt-strictness
// raise_all (the extra files also under raise_unexpected), warnings otherwise, and an unlisted file is never read.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/key_map.h"
#include "checkpoint/safetensors.h"

namespace hytra {

struct CheckpointManifest {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  int64_t consumed_valid_samples = 0;
  int64_t optimizer_step = 0;
  std::string config;  // the run's flags as text (informational)
  // The resolved model configuration (model/architecture.h): (flag name, value); empty in
  // checkpoints written before hytra recorded it (has_model_record false).
  std::vector<std::pair<std::string, std::string>> model;
  bool has_model_record = false;
  std::vector<std::string> files;     // the files the manifest lists that are present (verified)
  std::vector<std::string> missing;   // the files it lists that are absent
  std::vector<std::string> unlisted;  // .safetensors files in the directory it does not list (never read)
};

struct CheckpointContents {
  CheckpointManifest manifest;
  std::vector<SafetensorsTensor> model;      // canonical keys
  std::vector<SafetensorsTensor> optimizer;  // empty: no optimizer state
  std::string run_config;                    // run_config.yaml's text; empty: no such file
};

std::string iteration_dir_name(int64_t iteration);  // "iter_0000100"

// Writes SAVE/iter_XXXXXXX atomically and points latest_checkpointed_iteration.txt at it; keeps the
// newest `keep` iteration directories when keep > 0. F32 tensors holding NaN or Inf are refused
// (an error naming the first such keys) unless allow_non_finite.
void save_checkpoint(const std::string& save_dir, CheckpointContents contents, int64_t keep = 0,
                     bool allow_non_finite = false);

// The directory named by LOAD/latest_checkpointed_iteration.txt (or LOAD itself when it is an
// iteration directory); errors name the file.
std::string resolve_checkpoint_dir(const std::string& load);
// Whether `load` holds no checkpoint at all yet: it does not exist, or is a directory without a manifest, an
// iteration tracker or any iter_* directory (a resumable job's first start with --save DIR --load DIR, which Megatron
// trains from scratch).
bool holds_no_checkpoint(const std::string& load);
CheckpointManifest read_manifest(const std::string& dir);  // verifies the present files' sizes and checksums
// The path of the iteration directory `dir`'s run_config.yaml, its size and checksum verified against the manifest
// (the other files are not read); "" when the manifest does not list one (an older hytra's or a converted
// checkpoint).
std::string checkpoint_run_config(const std::string& dir);
// The file rules of a load from `dir` that reads the files `reads`: each must be listed and present; missing
// and unlisted files are errors or `warnings` per `strictness` (above).
void check_manifest_files(const CheckpointManifest& m, const std::string& dir, const std::set<std::string>& reads,
                          Strictness strictness, std::vector<std::string>& warnings);

// Leftover temporary directories and files of failed or killed saves in a --save directory.
std::vector<std::string> leftover_save_temporaries(const std::string& save_dir);

// The name of the first non-finite F32 element's tensor ("" when all are finite; other dtypes pass).
std::string first_non_finite(const std::vector<SafetensorsTensor>& tensors);
// Whether the `count` F32 values at `bytes` (possibly unaligned) are all finite.
bool all_finite_f32(const unsigned char* bytes, int64_t count);

}  // namespace hytra
