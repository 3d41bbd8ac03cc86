#include "train/checkpointing.h"

#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/key_map.h"
#include "core/log.h"
#include "core/error.h"

namespace hytra {
namespace {

SafetensorsTensor to_file(const std::string& name, const Tensor& t) {
  HYTRA_CHECK(t.dtype() == DType::F32, "checkpoint: tensor ", name, " is ", dtype_name(t.dtype()), ", expected fp32");
  SafetensorsTensor out{name, "F32", t.shape(), std::vector<unsigned char>(t.nbytes())};
  memcpy_any(out.bytes.data(), Device::CPU, t.raw(), t.device(), t.nbytes());
  return out;
}

void from_file(const SafetensorsFile& f, const std::string& name, const Tensor& dst, const std::string& file) {
  const SafetensorsEntry* e = f.find(name);
  HYTRA_ASSERT(e != nullptr, file, ": missing tensor '", name, "'");
  HYTRA_CHECK(e->dtype == "F32" && e->shape == dst.shape(), file, ": tensor '", name, "' is ", e->dtype,
              shape_str(e->shape), ", the model expects F32", shape_str(dst.shape()));
  memcpy_any(dst.raw(), dst.device(), f.data(*e), Device::CPU, dst.nbytes());
}

}  // namespace

void save_training_state(const TrainConfig& tc, ParamStore& params, const AdamW& opt, const ResumePoint& at,
                         const std::string& config_text) {
  CheckpointContents c;
  c.manifest.iteration = at.iteration;
  c.manifest.consumed_samples = at.consumed_samples;
  c.manifest.consumed_valid_samples = at.consumed_valid_samples;
  c.manifest.optimizer_step = opt.steps_taken();
  c.manifest.config = config_text;
  size_t i = 0;
  for (Param* p : params.all()) {
    c.model.push_back(to_file(p->name, p->master));
    c.optimizer.push_back(to_file(p->name + ".exp_avg", opt.exp_avg()[i]));
    c.optimizer.push_back(to_file(p->name + ".exp_avg_sq", opt.exp_avg_sq()[i]));
    ++i;
  }
  save_checkpoint(tc.save, std::move(c), tc.ckpt_keep);
}

namespace {

// Fills each (expected key -> tensor) from the file, through the aliases and the strictness rules.
void load_tensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& targets,
                  Strictness strictness) {
  SafetensorsFile f(path);
  std::vector<std::string> file_keys;
  for (const auto& e : f.entries()) file_keys.push_back(e.name);
  std::set<std::string> expected;
  for (const auto& [k, t] : targets) expected.insert(k);
  // Names the file keys take in this model's layout (GPT layers into an ungrouped hybrid model).
  const std::vector<std::string> renamed = gpt_keys_as_hybrid(file_keys, expected);
  std::map<std::string, std::string> original;
  for (size_t i = 0; i < renamed.size(); ++i) original[renamed[i]] = file_keys[i];
  std::vector<std::string> warnings;
  const auto fill = match_keys(renamed, expected, strictness, path, warnings);
  for (const auto& w : warnings) log_warn(w);
  for (const auto& [k, t] : targets) {
    auto it = fill.find(k);
    if (it != fill.end()) from_file(f, original.at(it->second), t, path);
  }
}

}  // namespace

ResumePoint load_training_state(const TrainConfig& tc, ParamStore& params, AdamW& opt) {
  const std::string dir = resolve_checkpoint_dir(tc.load);
  const CheckpointManifest m = read_manifest(dir);
  const Strictness strictness = parse_strictness(tc.ckpt_strictness);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (Param* p : params.all()) weights.emplace_back(p->name, p->master);
  load_tensors(dir + "/model.safetensors", weights, strictness);
  params.sync_values_from_master();
  ResumePoint at;
  if (tc.finetune) return at;
  at = {m.iteration, m.consumed_samples, m.consumed_valid_samples};
  if (tc.no_load_optim) return at;
  std::vector<std::pair<std::string, Tensor>> moments;
  size_t i = 0;
  for (Param* p : params.all()) {
    moments.emplace_back(p->name + ".exp_avg", opt.exp_avg()[i]);
    moments.emplace_back(p->name + ".exp_avg_sq", opt.exp_avg_sq()[i]);
    ++i;
  }
  load_tensors(dir + "/optimizer.safetensors", moments, strictness);
  opt.set_steps_taken(m.optimizer_step);
  return at;
}

}  // namespace hytra
