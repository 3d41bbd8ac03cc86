#include "train/checkpointing.h"

#include <set>

#include "checkpoint/checkpoint.h"
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
  HYTRA_CHECK(e != nullptr, file, ": missing tensor '", name, "'");
  HYTRA_CHECK(e->dtype == "F32" && e->shape == dst.shape(), file, ": tensor '", name, "' is ", e->dtype,
              shape_str(e->shape), ", the model expects F32", shape_str(dst.shape()));
  memcpy_any(dst.raw(), dst.device(), f.data(*e), Device::CPU, dst.nbytes());
}

}  // namespace

void save_training_state(const TrainConfig& tc, ParamStore& params, const AdamW& opt, const ResumePoint& at) {
  CheckpointContents c;
  c.manifest.iteration = at.iteration;
  c.manifest.consumed_samples = at.consumed_samples;
  c.manifest.consumed_valid_samples = at.consumed_valid_samples;
  c.manifest.optimizer_step = opt.steps_taken();
  size_t i = 0;
  for (Param* p : params.all()) {
    c.model.push_back(to_file(p->name, p->value));
    c.optimizer.push_back(to_file(p->name + ".exp_avg", opt.exp_avg()[i]));
    c.optimizer.push_back(to_file(p->name + ".exp_avg_sq", opt.exp_avg_sq()[i]));
    ++i;
  }
  save_checkpoint(tc.save, std::move(c), tc.ckpt_keep);
}

ResumePoint load_training_state(const TrainConfig& tc, ParamStore& params, AdamW& opt) {
  const std::string dir = resolve_checkpoint_dir(tc.load);
  const CheckpointManifest m = read_manifest(dir);
  const std::string model_path = dir + "/model.safetensors";
  SafetensorsFile model(model_path);
  std::set<std::string> expected;
  for (Param* p : params.all()) {
    from_file(model, p->name, p->value, model_path);
    expected.insert(p->name);
  }
  for (const auto& e : model.entries())
    HYTRA_CHECK(expected.count(e.name), model_path, ": unexpected tensor '", e.name, "' (not a parameter of this model)");
  ResumePoint at;
  if (tc.finetune) return at;
  at = {m.iteration, m.consumed_samples, m.consumed_valid_samples};
  if (tc.no_load_optim) return at;
  const std::string opt_path = dir + "/optimizer.safetensors";
  SafetensorsFile state(opt_path);
  size_t i = 0;
  for (Param* p : params.all()) {
    from_file(state, p->name + ".exp_avg", opt.exp_avg()[i], opt_path);
    from_file(state, p->name + ".exp_avg_sq", opt.exp_avg_sq()[i], opt_path);
    ++i;
  }
  opt.set_steps_taken(m.optimizer_step);
  return at;
}

}  // namespace hytra
