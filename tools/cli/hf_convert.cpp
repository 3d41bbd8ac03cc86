#include "cli/hf_convert.h"

#include "checkpoint/checkpoint.h"
#include "cli/flags.h"
#include "core/error.h"
#include "model/architecture.h"
#include "model/hybrid_model.h"
#include "model/model_plan.h"
#include "train/adamw.h"
#include "train/checkpointing.h"

namespace hytra {

HfFamily convert_to_hf(const ModelConfig& trained, const TrainConfig& tc, const std::string& out_dir,
                       std::optional<HfFamily> family, const HfExportOptions& opt) {
  HYTRA_CHECK(!tc.load.empty(), "--load: required (the checkpoint to convert)");
  // Per-expert tensors (Hugging Face's layout); the loader splits a checkpoint's grouped ones.
  ModelConfig mc = trained;
  mc.moe_single_grouped_weight = mc.moe_single_grouped_bias = false;
  const LayerPlan plan = plan_for(mc);
  const HfFamily f = family.value_or(hf_family_for(mc, plan));
  {  // the model's form first: no checkpoint read for a model that has none
    const std::vector<std::string> errors = hf_export_errors(mc, plan, f);
    std::string text;
    for (const std::string& m : errors) text += "\n  " + m;
    HYTRA_CHECK(errors.empty(), "hytra convert --to-hf: the model has no ", hf_family_name(f), " form:", text);
  }
  HybridModel model(mc, plan);
  model.params().finalize(DType::F32, Device::CPU);
  init_params(model.params(), tc.seed);
  OptimizerState unused;
  TrainConfig weights_only = tc;
  weights_only.finetune = true;
  load_training_state(weights_only, model.params(), unused, architecture_record(mc, model.plan()));
  std::map<std::string, HostTensor> weights;
  for (const Param* p : model.params().all()) {
    const Tensor& v = p->master;
    weights[p->name] = HostTensor{v.shape(), std::vector<float>(v.data<float>(), v.data<float>() + v.numel())};
  }
  export_hf(mc, plan, weights, f, out_dir, opt);
  return f;
}

HfImport convert_from_hf(const std::string& hf_dir, const std::string& save_dir) {
  HfImport out;
  const HfModelFlags hf = read_hf_config(hf_dir);
  out.family = hf.family;
  out.model_flags = hf.flags;
  ModelConfig mc;
  TrainConfig tc;
  std::vector<std::string> args = hf.flags;
  args.insert(args.end(),
              {"--mock-data", "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1", "--seq-length", "1"});
  HYTRA_CHECK(parse_train_args(args, mc, tc, nullptr), "hytra convert --from-hf: ", hf_dir, "/config.json");
  const LayerPlan plan = plan_for(mc);
  std::map<std::string, HostTensor> weights = import_hf_weights(hf_dir, mc, plan, hf.family);
  HybridModel model(mc, plan);  // its parameters: names, shapes and order
  CheckpointContents c;
  c.manifest.config = "converted from the Hugging Face folder " + hf_dir;
  for (const ArchitectureEntry& e : architecture_record(mc, model.plan()))
    c.manifest.model.emplace_back(e.name, e.value);
  for (const Param* p : model.params().all()) {
    const auto it = weights.find(p->name);
    HYTRA_CHECK(it != weights.end(), hf_dir, ": nothing fills hytra's '", p->name, "'");
    HYTRA_CHECK(it->second.shape == p->shape, hf_dir, ": '", p->name, "' comes out ", shape_str(it->second.shape),
                ", the model expects ", shape_str(p->shape));
    SafetensorsTensor t{p->name, "F32", p->shape, std::vector<unsigned char>(it->second.values.size() * 4)};
    std::memcpy(t.bytes.data(), it->second.values.data(), t.bytes.size());
    c.model.push_back(std::move(t));
  }
  save_checkpoint(save_dir, std::move(c));
  out.checkpoint = save_dir + "/" + iteration_dir_name(0);
  return out;
}

std::string convert_from_megatron(const ModelConfig& mc, const TrainConfig& tc, const std::string& file,
                                  const std::string& save_dir) {
  HybridModel model(mc, plan_for(mc));
  model.params().finalize(DType::F32, Device::CPU);
  init_params(model.params(), tc.seed);
  load_weights_file(file, model.params(), tc.ckpt_strictness);
  CheckpointContents c;
  c.manifest.config = "converted from the Megatron parameters in " + file;
  for (const ArchitectureEntry& e : architecture_record(mc, model.plan()))
    c.manifest.model.emplace_back(e.name, e.value);
  for (const Param* p : model.params().all()) {
    SafetensorsTensor t{p->name, "F32", p->shape, std::vector<unsigned char>(size_t(p->master.numel()) * 4)};
    std::memcpy(t.bytes.data(), p->master.data<float>(), t.bytes.size());
    c.model.push_back(std::move(t));
  }
  save_checkpoint(save_dir, std::move(c));
  return save_dir + "/" + iteration_dir_name(0);
}

}  // namespace hytra
