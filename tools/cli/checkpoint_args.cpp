#include "cli/checkpoint_args.h"

#include <algorithm>
#include <set>

#include "checkpoint/checkpoint.h"
#include "cli/flags.h"
#include "core/error.h"

namespace hytra {
namespace {

// Model flags that are the run's choices, not the network's shape: never taken from the checkpoint.
const std::set<std::string>& run_choices() {
  static const std::set<std::string> names = {"--recompute-granularity",
                                              "--recompute-method",
                                              "--recompute-num-layers",
                                              "--recompute-modules",
                                              "--mhc-recompute-layer-num",
                                              "--mtp-loss-scaling-factor",
                                              "--decoder-first-pipeline-num-layers",
                                              "--decoder-last-pipeline-num-layers",
                                              "--init-method-std",
                                              "--mhc-init-gating-factor",
                                              "--moe-aux-loss-coeff",
                                              "--moe-z-loss-coeff",
                                              "--moe-router-bias-update-rate"};
  return names;
}

// Megatron sets these only where the run leaves them unset.
bool taken_when_unset(const std::string& flag) {
  static const std::set<std::string> names = {
      "--num-layers",  "--hidden-size", "--ffn-hidden-size",         "--num-attention-heads",
      "--kv-channels", "--seq-length",  "--max-position-embeddings", "--vocab-size"};
  return names.count(flag) > 0;
}

std::string joined(const std::optional<FlagValues>& v) {
  if (!v) return "None";
  std::string out;
  for (const std::string& x : *v) out += (out.empty() ? "" : " ") + x;
  return out;
}

}  // namespace

std::vector<std::string> checkpoint_arg_flags() {
  ModelConfig scratch;
  FlagTable model;
  add_model_flags(model, scratch);
  std::vector<std::string> out;
  for (const FlagSpec& row : model.rows())
    if (!run_choices().count(row.name)) out.push_back(row.name);
  TokenizerConfig scratch_tokenizer;
  FlagTable tokenizer;
  add_tokenizer_flags(tokenizer, scratch_tokenizer);
  for (const FlagSpec& row : tokenizer.rows()) out.push_back(row.name);
  return out;
}

void apply_checkpoint_args(FlagTable& table, TrainConfig& train) {
  HYTRA_CHECK(!train.load.empty(), "--use-checkpoint-args: needs --load (the checkpoint whose flags to use)");
  if (holds_no_checkpoint(train.load)) {
    train.from_checkpoint.push_back(str("nothing: ", train.load, " holds no checkpoint yet (the flags as given)"));
    return;
  }
  const std::string dir = resolve_checkpoint_dir(train.load);
  const std::string path = checkpoint_run_config(dir);
  if (path.empty()) {
    train.from_checkpoint.push_back(
        str("nothing: ", dir, " records no run_config.yaml (an older or converted checkpoint; the flags as given)"));
    return;
  }
  const std::vector<std::string> taken = checkpoint_arg_flags();
  ConfigFile file = read_config_file(path);
  std::erase_if(file.entries, [&](const ConfigEntry& e) {
    const std::string flag = "--" + e.key;
    return std::find(taken.begin(), taken.end(), flag) == taken.end() || (taken_when_unset(flag) && table.is_set(flag));
  });
  std::vector<std::optional<FlagValues>> before;
  for (const ConfigEntry& e : file.entries) before.push_back(table.value_of("--" + e.key));
  table.apply_config(file);
  for (size_t i = 0; i < file.entries.size(); ++i) {
    const std::string flag = "--" + file.entries[i].key;
    const std::optional<FlagValues> now = table.value_of(flag);
    if (now != before[i])
      train.from_checkpoint.push_back(str(flag, " ", joined(now), " (was ", joined(before[i]), ")"));
  }
}

}  // namespace hytra
