#include "cli/eval_step.h"

#include <climits>
#include <cstring>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "model/architecture.h"
#include "model/hybrid_model.h"
#include "ops/ops.h"
#include "train/adamw.h"
#include "train/checkpointing.h"

namespace hytra {
namespace {

// A 2-D integer tensor of the batch file as int32 values, each a token id in [0, vocab) or, where
// negatives_ignored (labels), a negative value marking a position that is not a target.
Tensor read_ids(const SafetensorsFile& f, const std::string& name, const std::string& path, int64_t vocab,
                bool negatives_ignored) {
  const SafetensorsEntry* e = f.find(name);
  HYTRA_CHECK(e != nullptr, path, ": no tensor '", name, "'");
  HYTRA_CHECK(e->shape.size() == 2 && (e->dtype == "I32" || e->dtype == "I64"), path, ": '", name,
              "' must be a 2-D I32 or I64 tensor, got ", e->dtype, " with ", e->shape.size(), " dims");
  Tensor t = Tensor::empty({e->shape[0], e->shape[1]}, DType::I32);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = 0;
    if (e->dtype == "I32") {
      int32_t x;
      std::memcpy(&x, f.data(*e) + 4 * i, 4);
      v = x;
    } else {
      std::memcpy(&v, f.data(*e) + 8 * i, 8);
    }
    HYTRA_CHECK((v >= 0 && v < vocab) || (negatives_ignored && v < 0 && v >= INT32_MIN), path, ": '", name,
                "' element ", i, " is ", v, ", expected a token id in [0, ", vocab,
                ") (--vocab-size or the tokenizer's)",
                negatives_ignored ? " or a negative value for an ignored position" : "");
    t.data<int32_t>()[i] = int32_t(v);
  }
  return t;
}

SafetensorsTensor f32_of(const std::string& name, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::F32);
  Exec& ex = Exec::cpu();
  Tensor src = t.to(Device::CPU);
  ops::copy(ex, h, src);
  SafetensorsTensor out{name, "F32", t.shape(), std::vector<unsigned char>(h.nbytes())};
  std::memcpy(out.bytes.data(), h.raw(), h.nbytes());
  return out;
}

}  // namespace

void eval_step(const ModelConfig& mc, const TrainConfig& tc, const std::string& batch_path,
               const std::string& out_path) {
  HYTRA_CHECK(!tc.load.empty(), "--load: required (the checkpoint to evaluate)");
  SafetensorsFile batch(batch_path);
  Tensor ids, labels;
  if (batch.find("tokens")) {
    Tensor tokens = read_ids(batch, "tokens", batch_path, mc.vocab_size, false);  // (B, T+1)
    const int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    HYTRA_CHECK(T >= 1, batch_path, ": 'tokens' needs at least 2 columns");
    ids = Tensor::empty({B, T}, DType::I32);
    labels = Tensor::empty({B, T}, DType::I32);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        ids.data<int32_t>()[b * T + t] = tokens.data<int32_t>()[b * (T + 1) + t];
        labels.data<int32_t>()[b * T + t] = tokens.data<int32_t>()[b * (T + 1) + t + 1];
      }
  } else {
    ids = read_ids(batch, "input_ids", batch_path, mc.vocab_size, false);
    labels = read_ids(batch, "labels", batch_path, mc.vocab_size, true);
    HYTRA_CHECK(ids.shape() == labels.shape(), batch_path, ": 'input_ids' and 'labels' differ in shape");
  }
  HYTRA_CHECK(ids.numel() > 0, batch_path, ": the batch is empty (", shape_str(ids.shape()),
              "): expected at least one sequence of at least one token");
  HYTRA_CHECK(mc.position_embedding_type != PositionEmbedding::LearnedAbsolute || ids.size(1) <= mc.max_positions(),
              batch_path, ": sequences of ", ids.size(1), " tokens exceed the ", mc.max_positions(),
              " learned positions (--max-position-embeddings, default --seq-length)");
  const Device dev = tc.device == DeviceChoice::CUDA || (tc.device == DeviceChoice::Auto && cuda_available())
                         ? Device::CUDA
                         : Device::CPU;
  Exec& ex = Exec::for_device(dev);
  HybridModel model(mc, plan_for(mc));
  model.params().finalize(DType::F32, dev);
  init_params(model.params(), tc.seed);
  OptimizerState unused;  // parameters only
  TrainConfig weights_only = tc;
  weights_only.finetune = true;
  load_training_state(weights_only, model.params(), unused, architecture_record(mc, model.plan()));
  model.params().zero_grad();

  StepContext ctx(ex);
  Tensor losses = model.forward(ctx, ids.to(dev), labels.to(dev));  // (B, T)
  int64_t targets = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) targets += labels.data<int32_t>()[i] >= 0;
  HYTRA_CHECK(targets > 0, batch_path, ": no label is a target (all are negative)");
  std::vector<double> d(size_t(labels.numel()));
  double sum = 0;
  const std::vector<double> l = losses.to_f64_vector();
  for (size_t i = 0; i < d.size(); ++i) {
    const bool target = labels.data<int32_t>()[i] >= 0;
    d[i] = target ? 1.0 / double(targets) : 0.0;
    sum += target ? l[i] : 0.0;
  }
  Tensor dloss = Tensor::empty(losses.shape(), losses.dtype(), dev);
  dloss.copy_from_f64(d);
  model.backward(ctx, dloss);

  std::vector<SafetensorsTensor> out = {f32_of("losses", losses)};
  Tensor mean = Tensor::empty({}, DType::F32);
  mean.copy_from({float(sum / double(targets))});
  out.push_back(f32_of("loss", mean));
  if (mc.position_embedding_type != PositionEmbedding::LearnedAbsolute) {
    StepContext fresh(ex);
    fresh.grad_enabled = false;
    const Tensor padded = model.logits(fresh, ids.to(dev)).to(Device::CPU);  // (B, T, padded vocabulary)
    const int64_t B = ids.size(0), T = ids.size(1), Vp = padded.size(2), V = mc.vocab_size;
    Tensor logits = Tensor::empty({B, T, V}, DType::F32);
    for (int64_t r = 0; r < B * T; ++r)
      std::memcpy(logits.data<float>() + r * V, padded.data<float>() + r * Vp, size_t(V) * sizeof(float));
    out.push_back(f32_of("logits", logits));
  }
  for (Param* p : model.params().all()) out.push_back(f32_of(p->name, p->grad));
  write_safetensors(out_path, std::move(out), {{"format", "pt"}});
}

}  // namespace hytra
