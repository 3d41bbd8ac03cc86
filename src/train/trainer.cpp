#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/log.h"
#include "core/nvtx.h"
#include "core/progress.h"
#include "data/gpt_data.h"
#include "data/gpt_dataset.h"
#include "data/loader.h"
#include "data/mock_dataset.h"
#include "dist/parallel_context.h"
#include "model/hybrid_model.h"
#include "model/layer_kinds.h"
#include "model/naming.h"
#include "ops/ops.h"
#include "train/adamw.h"
#include "train/checkpointing.h"
#include "train/combined_schedule.h"
#include "train/distributed_optimizer.h"
#include "train/exit_signal.h"
#include "train/lr_schedule.h"
#include "train/metrics/jsonl.h"
#include "train/metrics/log_line.h"
#include "train/metrics/tensorboard.h"
#include "train/micro_batch.h"
#include "train/pipeline_runner.h"
#include "train/pipeline_schedule.h"
#include "train/tensor_parallel_state.h"

namespace hytra {
namespace {

Device resolve_device(DeviceChoice choice) {
  if (choice == DeviceChoice::CPU) return Device::CPU;
  if (choice == DeviceChoice::CUDA) {
    HYTRA_CHECK(cuda_available(), "--device cuda: no CUDA device is available in this build or on this machine");
    return Device::CUDA;
  }
  return cuda_available() ? Device::CUDA : Device::CPU;
}

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", std::chrono::duration<double>(d).count());
  return text;
}

LrScheduleConfig lr_schedule_of(const TrainConfig& tc) {
  LrScheduleConfig c;
  c.max_lr = tc.lr;
  c.min_lr = tc.min_lr;
  c.warmup_init = tc.lr_warmup_init;
  // A sample-based run counts the schedule in samples, as Megatron (the step is then the consumed samples).
  const bool samples = tc.train_samples > 0;
  c.decay_steps = samples ? (tc.lr_decay_samples > 0 ? tc.lr_decay_samples : tc.train_samples)
                          : (tc.lr_decay_iters > 0 ? tc.lr_decay_iters : tc.train_iters);
  c.warmup_steps = tc.lr_warmup_fraction >= 0 ? tc.lr_warmup_fraction * double(c.decay_steps)
                                              : double(samples ? tc.lr_warmup_samples : tc.lr_warmup_iters);
  c.decay_style = tc.lr_decay_style;
  c.wsd_decay_style = tc.lr_wsd_decay_style;
  c.wsd_decay_steps = samples ? tc.lr_wsd_decay_samples : tc.lr_wsd_decay_iters;
  validate(c);
  return c;
}

// The MoE entries of the log (Megatron's track_moe_metrics): each layer's load-balancing and z losses
// without their coefficients, averaged over the micro-batches of a step and over the steps of the
// log interval, and its routed tokens summed over the interval; the line shows the means over layers.
class MoeInterval {
 public:
  void add(const std::vector<MoeStats>& moe, const ModelConfig& mc) {
    if (layers_.empty()) layers_.resize(moe.size());
    for (size_t i = 0; i < moe.size(); ++i) {
      const MoeStats& m = moe[i];
      const double mb = double(std::max<int64_t>(m.micro_batches, 1));
      MoeLayerLog& l = layers_[i];
      l.layer = m.layer_number;
      if (mc.moe_aux_loss_coeff > 0) l.load_balancing_loss += m.aux_loss / mb / mc.moe_aux_loss_coeff;
      if (mc.moe_z_loss_coeff > 0) l.z_loss += m.z_loss / mb / mc.moe_z_loss_coeff;
      l.tokens_per_expert.resize(m.tokens_per_expert.size(), 0);
      for (size_t e = 0; e < m.tokens_per_expert.size(); ++e) l.tokens_per_expert[e] += m.tokens_per_expert[e];
    }
    ++iterations_;
  }
  // Moves the interval's means into the record and starts a new interval.
  void fill(IterationLog& rec, const ModelConfig& mc) {
    if (layers_.empty()) return;
    double aux = 0, z = 0;
    for (MoeLayerLog& l : layers_) {
      l.load_balancing_loss /= double(iterations_);
      l.z_loss /= double(iterations_);
      aux += l.load_balancing_loss / double(layers_.size());
      z += l.z_loss / double(layers_.size());
    }
    const LoadBalancing type = mc.moe_router_load_balancing_type;
    if (type != LoadBalancing::None && mc.moe_aux_loss_coeff > 0)
      rec.moe_metrics.push_back({type == LoadBalancing::SeqAuxLoss      ? "seq_load_balancing_loss"
                                 : type == LoadBalancing::GlobalAuxLoss ? "global_load_balancing_loss"
                                                                        : "load_balancing_loss",
                                 aux});
    if (mc.moe_z_loss_coeff > 0) rec.moe_metrics.push_back({"z_loss", z});
    rec.moe_layers = std::move(layers_);
    layers_.clear();
    iterations_ = 0;
  }

 private:
  std::vector<MoeLayerLog> layers_;
  int64_t iterations_ = 0;
};

// A host tensor through a communicator (NCCL: by way of the device).
template <class Op>
void on_comm_device(dist::Communicator& comm, Tensor& t, Op op) {
  if (comm.device() == Device::CPU) {
    op(t);
    return;
  }
  Tensor d = t.to(comm.device());
  op(d);
  t = d.to(Device::CPU);
}

// The data-parallel group's view of a run: this rank's place in it and the sums over it (one process: rank 0
// of 1, sums of one).
class DataParallel {
 public:
  explicit DataParallel(dist::Communicator* comm) : comm_(comm) {}
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int size() const { return comm_ ? comm_->size() : 1; }
  // This rank's first sample of micro-batch step m (mbs samples a rank) of a batch starting at sample `first`
  // (Megatron's sampler: each step takes mbs x ranks consecutive samples, rank r the r-th mbs of them).
  int64_t sample(int64_t first, int64_t m, int64_t mbs) const { return first + (m * size() + rank()) * mbs; }
  // The mean over the ranks of a value each rank computed over its own micro-batches.
  double mean(double v) const { return mean(std::vector<double>{v})[0]; }
  std::vector<double> mean(std::vector<double> v) const {
    if (!comm_ || v.empty()) return v;
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::F64);
    t.copy_from_f64(v);
    sum_host(t);
    v = t.to_f64_vector();
    for (double& x : v) x /= double(size());
    return v;
  }
  // The MoE layers' statistics summed over the ranks (losses, micro-batches and routed tokens).
  std::vector<MoeStats> sum(std::vector<MoeStats> s) const {
    if (!comm_ || s.empty()) return s;
    std::vector<double> f;
    std::vector<int64_t> n;
    for (const MoeStats& m : s) {
      f.push_back(m.aux_loss);
      f.push_back(m.z_loss);
      n.push_back(m.micro_batches);
      n.insert(n.end(), m.tokens_per_expert.begin(), m.tokens_per_expert.end());
    }
    Tensor tf = Tensor::empty({int64_t(f.size())}, DType::F64), tn = Tensor::empty({int64_t(n.size())}, DType::I64);
    tf.copy_from_f64(f);
    std::copy(n.begin(), n.end(), tn.data<int64_t>());
    sum_host(tf);
    sum_host(tn);
    const double* pf = tf.data<double>();
    const int64_t* pn = tn.data<int64_t>();
    for (MoeStats& m : s) {
      m.aux_loss = *pf++;
      m.z_loss = *pf++;
      m.micro_batches = *pn++;
      for (int64_t& c : m.tokens_per_expert) c = *pn++;
    }
    return s;
  }
  void barrier() const {
    if (comm_) comm_->barrier();
  }

 private:
  // A host tensor summed over the ranks (through the device for NCCL).
  void sum_host(Tensor& t) const {
    on_comm_device(*comm_, t, [&](Tensor& x) { comm_->all_reduce_sum(x); });
  }

  dist::Communicator* comm_;
};

// A pipeline rank's model chunks: one, or under the interleaved schedule (the pattern's pipes give each rank several
// segments) one a virtual stage, the later ones sharing the first one's parameter store, in chunk order.
std::vector<std::unique_ptr<HybridModel>> stage_chunks(const ModelConfig& mc, int64_t stages, int64_t rank,
                                                       const TensorParallel& tp = {}, const ExpertParallel& ep = {}) {
  std::vector<std::unique_ptr<HybridModel>> out;
  out.push_back(std::make_unique<HybridModel>(mc, plan_for(mc, stages, rank), tp, nullptr, ep));
  const int64_t segments = out[0]->plan().num_segments;
  for (int64_t v = 1; stages > 1 && segments > stages && v < segments / stages; ++v)
    out.push_back(std::make_unique<HybridModel>(mc, plan_for(mc, stages, rank, v), tp, &out[0]->params(), ep));
  return out;
}

// The parameters (names, shapes, flags) of pipeline rank `rank`'s chunks on expert-parallel rank ep.rank.
std::vector<Param> expert_params_of(const ModelConfig& mc, int64_t stages, int64_t rank, const ExpertParallel& ep) {
  const std::vector<std::unique_ptr<HybridModel>> chunks = stage_chunks(mc, stages, rank, {}, ep);
  std::vector<Param> out;
  for (const Param* p : chunks[0]->params().all()) out.push_back(*p);
  return out;
}

// `states` in the whole model's parameter order (a checkpoint's order; every name one of the whole model's).
std::vector<ParamState> in_order_of(HybridModel& whole, std::vector<ParamState> states) {
  std::map<std::string, size_t> order;
  for (const Param* p : whole.params().all()) order.emplace(p->name, order.size());
  std::stable_sort(states.begin(), states.end(),
                   [&](const ParamState& a, const ParamState& b) { return order.at(a.name) < order.at(b.name); });
  return states;
}

// The parameter names of the whole model that `mine` does not hold (other pipeline stages', other expert-parallel
// ranks' experts): a load leaves them to their ranks.
std::set<std::string> names_elsewhere(HybridModel& whole, ParamStore& mine) {
  std::set<std::string> out;
  for (Param* p : whole.params().all())
    if (mine.find(p->name) == nullptr) out.insert(p->name);
  return out;
}

// The pipeline group's view of a run (docs/parallelism.md "Pipeline parallelism"): what the last stage computed
// handed to every stage, the MoE layers of every stage gathered for the log, the word embedding's gradient
// summed between the first and the last stage.
class Pipeline {
 public:
  explicit Pipeline(const dist::ParallelContext* par) : pp_(par ? par->pp.get() : nullptr), par_(par) {}
  bool active() const { return pp_ != nullptr; }
  dist::Communicator* comm() const { return pp_; }
  // The last stage's values (n of them) on every stage.
  std::vector<double> from_last(std::vector<double> v, size_t n) const {
    if (!pp_ || n == 0) return v;
    v.resize(n, 0.0);
    Tensor t = Tensor::empty({int64_t(n)}, DType::F64);
    t.copy_from_f64(v);
    on_comm_device(*pp_, t, [&](Tensor& x) { pp_->broadcast(x, pp_->size() - 1); });
    return t.to_f64_vector();
  }
  int64_t sum(int64_t v) const {
    if (!pp_) return v;
    Tensor t = Tensor::empty({1}, DType::I64);
    t.data<int64_t>()[0] = v;
    on_comm_device(*pp_, t, [&](Tensor& x) { pp_->all_reduce_sum(x); });
    return t.data<int64_t>()[0];
  }
  // Every stage's MoE statistics, in layer order (each stage broadcasts its own in turn).
  std::vector<MoeStats> gather(const std::vector<MoeStats>& mine) const {
    if (!pp_) return mine;
    std::vector<MoeStats> all;
    for (int s = 0; s < pp_->size(); ++s) {
      std::vector<int64_t> n;
      std::vector<double> f;
      if (s == pp_->rank()) {
        for (const MoeStats& m : mine) {
          n.insert(n.end(), {m.layer_number, m.micro_batches, int64_t(m.tokens_per_expert.size())});
          n.insert(n.end(), m.tokens_per_expert.begin(), m.tokens_per_expert.end());
          f.insert(f.end(), {m.aux_loss, m.z_loss});
        }
      }
      Tensor sizes = Tensor::empty({2}, DType::I64);
      sizes.data<int64_t>()[0] = int64_t(n.size());
      sizes.data<int64_t>()[1] = int64_t(f.size());
      on_comm_device(*pp_, sizes, [&](Tensor& x) { pp_->broadcast(x, s); });
      const int64_t nn = sizes.data<int64_t>()[0], nf = sizes.data<int64_t>()[1];
      if (nf == 0) continue;
      Tensor tn = Tensor::empty({nn}, DType::I64), tf = Tensor::empty({nf}, DType::F64);
      if (s == pp_->rank()) {
        std::copy(n.begin(), n.end(), tn.data<int64_t>());
        tf.copy_from_f64(f);
      }
      on_comm_device(*pp_, tn, [&](Tensor& x) { pp_->broadcast(x, s); });
      on_comm_device(*pp_, tf, [&](Tensor& x) { pp_->broadcast(x, s); });
      const int64_t* pn = tn.data<int64_t>();
      const std::vector<double> fv = tf.to_f64_vector();
      for (size_t l = 0; l < fv.size() / 2; ++l) {
        MoeStats m;
        m.layer_number = *pn++;
        m.micro_batches = *pn++;
        m.tokens_per_expert.assign(size_t(*pn), 0);
        ++pn;
        for (int64_t& c : m.tokens_per_expert) c = *pn++;
        m.aux_loss = fv[2 * l];
        m.z_loss = fv[2 * l + 1];
        all.push_back(std::move(m));
      }
    }
    // In layer order (an interleaved pipeline's stages hold every P-th segment).
    std::stable_sort(all.begin(), all.end(),
                     [](const MoeStats& a, const MoeStats& b) { return a.layer_number < b.layer_number; });
    return all;
  }
  // The whole model's parameter states on the pipeline's first stage, for a save (a collective of the
  // pipeline: each later stage sends its own, in its parameter order, the copy of the word embedding left out;
  // the first stage knows their shapes from the stages' plans).
  std::vector<ParamState> gather_states(std::vector<ParamState> mine, const ModelConfig& mc,
                                        const Param* copy) const {
    if (!pp_) return mine;
    if (copy != nullptr) std::erase_if(mine, [&](const ParamState& p) { return p.name == copy->name; });
    if (pp_->rank() > 0) {
      for (ParamState& p : mine)
        for (Tensor* t : {&p.value, &p.exp_avg, &p.exp_avg_sq}) pp_->send(*t, 0);
      return {};
    }
    const Device dev = mine.empty() ? pp_->device() : mine[0].value.device();
    for (int s = 1; s < pp_->size(); ++s) {
      const std::vector<std::unique_ptr<HybridModel>> stage = stage_chunks(mc, pp_->size(), s);  // names and shapes
      for (Param* p : stage[0]->params().all()) {
        if (p == stage.back()->embedding_copy()) continue;
        ParamState st{p->name, Tensor::empty(p->shape, DType::F32, dev), Tensor::empty(p->shape, DType::F32, dev),
                      Tensor::empty(p->shape, DType::F32, dev)};
        for (Tensor* t : {&st.value, &st.exp_avg, &st.exp_avg_sq}) pp_->recv(*t, s);
        mine.push_back(std::move(st));
      }
    }
    // In the whole model's order (an interleaved pipeline's stages hold every P-th segment).
    HybridModel whole(mc, plan_for(mc));
    return in_order_of(whole, std::move(mine));
  }
  void barrier() const {
    if (pp_) pp_->barrier();
  }
  // The word embedding's gradient summed over the first and the last stage (both then hold the whole) when the
  // last stage shares it (`shared`: a tied LM head or MTP depths).
  void sync_embedding(ParamStore& store, bool shared) const {
    if (!par_ || !par_->embedding || !shared) return;
    Param* w = store.find(kWordEmbeddingKey);
    HYTRA_ASSERT(w != nullptr, "the first or last pipeline stage without the word embedding");
    Tensor g = w->grad;  // a view of the flat gradient buffer
    par_->embedding->all_reduce_sum(g);
  }

 private:
  dist::Communicator* pp_;
  const dist::ParallelContext* par_;
};

// --check-for-nan-in-loss-and-grad's report of a non-finite step: the first parameter (canonical order) whose gradient
// is not finite, and, without pipeline parallelism, the first sub-layer whose output or input gradient is not finite
// when the step's micro-batches run again with a check after each sub-layer (ctx.check_finite). Every rank runs all
// its micro-batches, so the collectives of tensor and expert parallelism stay matched.
std::string non_finite_report(Exec& ex, HybridModel& model, bool rerun, const std::vector<Batch>& batches,
                              int64_t num_micro) {
  std::string param;
  for (const Param* p : model.params().all()) {
    Tensor total = Tensor::empty({1}, p->grad.dtype(), p->grad.device());
    ops::sum(ex, total, p->grad.view({p->grad.numel()}));
    if (!std::isfinite(total.to_f64_vector()[0])) {
      param = p->name;
      break;
    }
  }
  std::string report = param.empty() ? std::string("every gradient is finite on this rank (a norm can overflow)")
                                     : "the first parameter with a non-finite gradient: " + param;
  if (!rerun) return report + " (the layer check runs without pipeline parallelism)";
  std::string layer;
  const DType loss_dtype = stat_dtype(model.params().flat_values().dtype());
  for (size_t m = 0; m < batches.size(); ++m) {
    StepContext c(ex);
    c.check_finite = true;
    c.aux_loss_scale = 1.0 / double(num_micro);
    const Tensor losses = model.forward(c, batches[m].ids.to(ex.device()), batches[m].labels.to(ex.device()));
    const std::string forward = c.first_non_finite;
    model.backward(c, loss_gradient(batches[m], num_micro, loss_dtype).to(ex.device()));
    if (!layer.empty()) continue;
    if (!forward.empty())
      layer = str(forward, " (micro-batch ", m, "'s forward)");
    else if (!c.first_non_finite.empty())
      layer = str(c.first_non_finite, " (micro-batch ", m, "'s backward)");
  }
  return report + "; the first sub-layer to go non-finite: " +
         (layer.empty() ? std::string("none on this rank (a rerun of the step stays finite here)") : layer);
}

// Megatron's evaluate(): eval_iters steps of a global batch each, continuing through the
// validation samples from `first` (the next evaluation starts where this one stopped).
double validate_loss(MicroBatchRunner& runner, PipelineRunner* pipe, const SampleSource& data, int64_t first,
                     const TrainConfig& tc, const DataParallel& dp) {
  const int64_t mbs = tc.micro_batch_size, steps = tc.eval_iters * tc.num_micro_batches();
  std::vector<Batch> batches;
  for (int64_t i = 0; i < steps; ++i) batches.push_back(load_batch(data, dp.sample(first, i, mbs), mbs));
  if (pipe != nullptr) {
    pipe->evaluate(batches);
    return dp.mean(pipe->mean_loss());
  }
  ProgressBar bar("validation", steps, info_file(), 0.1, kPlainProgressSeconds);
  for (const Batch& b : batches) {
    runner.queue(b, 1, false, false);
    bar.advance();
  }
  const double loss = dp.mean(runner.mean_loss());
  bar.finish();
  return loss;
}

// Training and validation samples: --mock-data, or Megatron's GPT datasets over --data-path with
// as many samples as the run asks of each split.
std::array<std::shared_ptr<const SampleSource>, 2> data_sources(const ModelConfig& mc, const TrainConfig& tc) {
  if (tc.mock_data)
    return {std::make_shared<MockDataset>(mc.vocab_size, mc.seq_length, tc.seed, 0),
            std::make_shared<MockDataset>(mc.vocab_size, mc.seq_length, tc.seed, 1)};
  auto counts = split_sample_counts(tc.train_iters, tc.global_batch(), tc.eval_interval, tc.eval_iters);
  if (tc.train_samples > 0) counts[0] = tc.train_samples;  // Megatron's train_val_test_num_samples
  const auto splits = build_gpt_splits(tc.data_path, tc.split, mc.seq_length, uint32_t(tc.seed),
                                       {counts[0], counts[1], 0},  // the test split is not used in training
                                       tc.data_cache_path, mc.vocab_size);
  HYTRA_CHECK(splits[0].data != nullptr, "--split: '", tc.split, "' leaves no training data");
  HYTRA_CHECK(splits[1].data != nullptr || tc.eval_interval == 0 || tc.eval_iters == 0, "--split: '", tc.split,
              "' leaves no validation data (set --eval-iters 0 to train without validation)");
  return {splits[0].data, splits[1].data};
}

// Whether `mine` holds on any rank of the run: summed over the data-, tensor- and pipeline-parallel groups in turn,
// whose product is every rank (expert-parallel groups lie inside the data-parallel one).
bool any_rank(const dist::ParallelContext* par, bool mine) {
  if (par == nullptr) return mine;
  int32_t on = mine ? 1 : 0;
  for (dist::Communicator* c : {par->dp.get(), par->tp.get(), par->pp.get()}) {
    if (c == nullptr || c->size() == 1) continue;
    Tensor flag = Tensor::empty({1}, DType::I32);
    flag.data<int32_t>()[0] = on;
    Tensor d = flag.to(c->device());
    c->all_reduce_sum(d);
    on = d.to(Device::CPU).data<int32_t>()[0];
  }
  return on > 0;
}

}  // namespace

TrainResult train(const ModelConfig& mc, const TrainConfig& tc, std::ostream& log, dist::ParallelContext* par) {
  const DataParallel dp(par != nullptr ? par->dp.get() : nullptr);
  HYTRA_CHECK(tc.data_parallel_size == dp.size(), "the training configuration's data-parallel size (",
              tc.data_parallel_size, ") differs from the data-parallel group's (", dp.size(), ")");
  const bool rank0 = par == nullptr || par->rank == 0;
  nvtx_enabled = tc.profile_nvtx;
  const Device dev = resolve_device(tc.device);
  HYTRA_CHECK(par == nullptr || par->dp == nullptr || par->dp->device() == dev,
              "the data-parallel group "
              "communicates ",
              device_name(par != nullptr && par->dp ? par->dp->device() : dev), " tensors but the run trains on ",
              device_name(dev), " (--device)");
  HYTRA_CHECK(dp.size() == 1 || mc.moe_router_load_balancing_type != LoadBalancing::GlobalAuxLoss,
              "--moe-router-load-balancing-type global_aux_loss: not built yet with data parallelism");
  HYTRA_CHECK(!tc.bf16 || dev == Device::CUDA,
              "--bf16: bf16 mixed precision runs on the CUDA backend; the CPU "
              "reference computes in fp32 (drop --bf16 or use --device cuda on a GPU machine)");
  Exec& ex = Exec::for_device(dev);
  const LrScheduleConfig lr_cfg = lr_schedule_of(tc);

  const Pipeline pipeline(par);
  const int pp_size = par != nullptr ? par->pp_size() : 1, pp_rank = par != nullptr ? par->pp_rank() : 0;
  HYTRA_CHECK(pp_size > 1 || (mc.decoder_first_pipeline_num_layers == 0 && mc.decoder_last_pipeline_num_layers == 0),
              "--decoder-first/last-pipeline-num-layers: need --pipeline-model-parallel-size above 1");
  TensorParallel tp;
  if (par != nullptr && par->tp) tp = {par->tp.get(), par->tp_size(), par->tp_rank(), tc.sequence_parallel};
  HYTRA_CHECK(!tp.seq() || mc.seq_length % tp.size == 0, "--sequence-parallel: --seq-length (", mc.seq_length,
              ") must be divisible by --tensor-model-parallel-size (", tp.size, ")");
  ExpertParallel ep;
  if (par != nullptr && par->ep) ep = {par->ep.get(), par->ep_size(), par->ep_rank()};
  HYTRA_CHECK(!ep.on() || (mc.num_experts > 0 && mc.num_experts % ep.size == 0),
              "--expert-model-parallel-size ", ep.size, ": --num-experts (", mc.num_experts,
              ") must be a positive multiple of it");
  HYTRA_CHECK(!ep.on() || !tp.on() || (!mc.moe_single_grouped_weight && !mc.moe_single_grouped_bias),
              "--moe-single-grouped-weight / --moe-single-grouped-bias: with both tensor and expert parallelism not "
              "built yet (the per-expert tensors are)");
  HybridModel whole(mc, plan_for(mc));  // the whole model's layers and parameter count
  {
    const std::vector<std::string> errors = tensor_parallel_errors(mc, whole.layer_counts(), tp.size);
    std::string text;
    for (const std::string& e : errors) text += "\n  " + e;
    HYTRA_CHECK(errors.empty(), "--tensor-model-parallel-size ", tp.size, ": the model does not split:", text);
  }
  const std::vector<std::unique_ptr<HybridModel>> chunk_models = stage_chunks(mc, pp_size, pp_rank, tp, ep);
  std::vector<HybridModel*> chunks;
  for (const auto& c : chunk_models) chunks.push_back(c.get());
  if (tc.overlap_moe_expert_parallel_comm) {
    const std::vector<std::string> errors =
        ep_overlap_errors(mc, whole.layer_counts(), pp_size, int64_t(chunks.size()));
    std::string text;
    for (const std::string& e : errors) text += "\n  " + e;
    HYTRA_CHECK(errors.empty(), "--overlap-moe-expert-parallel-comm: the EP-overlap schedule cannot run this:", text);
  }
  HybridModel& model = *chunks[0];
  ParamStore& store = model.params();
  store.finalize(tc.bf16 ? DType::BF16 : DType::F32, dev,
                 DataParallelOptimizer::param_align(dp.size(), tc.use_distributed_optimizer));
  init_params(store, tc.seed);
  if (tc.after_init) tc.after_init(store);
  DataParallelOptimizer opt(store, AdamWConfig{tc.adam_beta1, tc.adam_beta2, tc.adam_eps, tc.weight_decay},
                            par != nullptr ? par->dp.get() : nullptr,
                            {tc.use_distributed_optimizer, tc.ddp_bucket_size, tc.overlap_grad_reduce,
                             tc.overlap_param_gather, ep.on() ? par->edp.get() : nullptr, ep.comm});
  const std::vector<ArchitectureEntry> arch = architecture_record(mc, model.plan());
  ResumePoint start;
  // A resumable job's first start (--save DIR --load DIR, nothing saved yet) trains from scratch, as Megatron.
  const bool load = !tc.load.empty() && !holds_no_checkpoint(tc.load);
  if (!tc.load.empty() && !load)
    info_stream(log) << "hytra: --load " << tc.load << " holds no checkpoint yet: training from the start\n";
  if (load) {
    const auto t_load = std::chrono::steady_clock::now();
    start = load_training_state(tc, store, opt.load_target(), arch,
                                pipeline.active() || ep.on() ? names_elsewhere(whole, store) : std::set<std::string>{});
    info_stream(log) << "hytra: loaded the checkpoint of iteration " << start.iteration << " from " << tc.load << " in "
                     << seconds_text(std::chrono::steady_clock::now() - t_load) << "\n";
  }
  if (load) opt.loaded(start.optimizer_loaded);
  if (tp.on()) opt.set_tensor_parallel(tp.comm);

  TrainResult result;
  const Param* copy = chunks.back()->embedding_copy();  // a later stage's copy of the word embedding
  result.num_params = whole.params().num_elements();
  const bool shares_embedding = !mc.untie_embeddings_and_output_weights || model.plan().mtp_depths > 0;
  if (pipeline.active())
    opt.set_pipeline(pipeline.comm(), copy,
                     par->embedding && shares_embedding ? store.find(kWordEmbeddingKey) : nullptr);
  const int64_t mbs = tc.micro_batch_size, gbs = tc.global_batch();
  const double flops_token = flops_per_token(mc, whole.layer_counts());
  for (const std::string& note : tc.no_effect) info_stream(log) << "hytra: " << note << "\n";
  for (const std::string& note : tc.from_checkpoint) info_stream(log) << "hytra: from the checkpoint: " << note << "\n";
  if (tc.train_samples > 0) info_stream(log) << "hytra: setting training iterations to " << tc.train_iters << "\n";
  if (tc.rampup.on())  // Megatron's line, its missing space included
    info_stream(log) << "hytra: will use batch size rampup starting from global batch size " << tc.rampup.start
                     << " to global batch size " << gbs << " with batchsize increments " << tc.rampup.increment
                     << " over " << tc.rampup.samples << " samples.\nhytra: setting initial batch size to "
                     << tc.rampup.start << "\n";
  info_stream(log) << "hytra: training " << result.num_params << " parameters on " << device_name(dev)
                   << (tc.bf16 ? " (bf16, fp32 master weights)" : " (fp32)") << ", pattern '"
                   << model.plan().main.value_or("") << "', " << tc.train_iters << " iterations of " << gbs << " x "
                   << mc.seq_length << " tokens (" << tc.num_micro_batches() << " micro-batches of " << mbs
                   << (dp.size() > 1 ? str(" on each of ", dp.size(), " data-parallel ranks") : std::string())
                   << (tc.rampup.on() ? " after the ramp" : "") << ")\n";
  if (tp.on())
    info_stream(log) << "hytra: tensor-parallel: " << tp.size << " ranks split each layer's weights"
                     << (tp.seq() ? ", the activations between them split along the sequence" : "") << "\n";

  if (dp.size() > 1) info_stream(log) << "hytra: data-parallel: " << opt.describe() << "\n";
  if (dp.size() > 1 || pipeline.active() || tp.on()) {  // what one rank holds (rank 0: the log's)
    const int64_t bytes = store.flat_values().nbytes() + store.flat_grads().nbytes() +
                          (store.has_separate_master() ? store.flat_master().nbytes() : 0) + opt.moment_bytes();
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.2f", double(bytes) / 1048576.0);
    info_stream(log) << "hytra: rank 0 holds " << store.num_elements() << " parameters: " << mib
                     << " MiB with their gradients, master weights and Adam moments\n";
  }
  // The first rank of the group builds the dataset index caches first, the others then read them (Megatron's
  // order: no two processes write one cache).
  if (dp.rank() != 0) dp.barrier();
  const auto [train_data, valid_data] = data_sources(mc, tc);
  if (dp.rank() == 0) dp.barrier();
  // The manifest's informational text: the run's training settings (its "model" object records the
  // resolved model configuration, model/architecture.cpp).
  const std::string config_text =
      str("seed=", tc.seed, " global_batch=", gbs, " micro_batch=", mbs, " lr=", tc.lr, " min_lr=", tc.min_lr,
          " lr_decay_style=", name_of(tc.lr_decay_style), " train_iters=", tc.train_iters, " bf16=", tc.bf16);
  int64_t valid_consumed = start.consumed_valid_samples;
  std::unique_ptr<JsonlWriter> jsonl;
  if (!tc.log_jsonl.empty() && rank0) jsonl = std::make_unique<JsonlWriter>(tc.log_jsonl);
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (!tc.tensorboard_dir.empty() && rank0) {
    tensorboard = std::make_unique<TensorBoardWriter>(tc.tensorboard_dir);
    info_stream(log) << "hytra: TensorBoard events in " << tensorboard->path() << "\n";
  }
  StepContext ctx(ex);
  ctx.delay_wgrad = tc.delay_wgrad_compute;
  if (par != nullptr && par->dp) ctx.param_hooks = &opt;  // the overlap of communication with the model's passes
  const std::string graphs_off = tc.no_cuda_graph                      ? "--no-cuda-graph"
                                 : pipeline.active()                   ? "pipeline-parallel steps run eagerly"
                                 : tp.on()                             ? "tensor-parallel steps run eagerly"
                                 : tc.overlap_moe_expert_parallel_comm ? "the EP-overlap schedule interleaves two "
                                                                         "micro-batches"
                                                                       : "";
  MicroBatchRunner runner(ex, model, ctx, graphs_off, log);
  std::unique_ptr<OverlapTimeline> timeline;
  if (tc.log_ep_overlap) timeline = std::make_unique<OverlapTimeline>(ex, ep.comm);
  std::unique_ptr<CombinedSchedule> combined;
  if (tc.overlap_moe_expert_parallel_comm) {
    if (!pipeline.active()) combined = std::make_unique<CombinedSchedule>(ex, model, ctx, timeline.get());
    info_stream(log) << "hytra: EP-overlap: the forward of each micro-batch interleaved with the backward of "
                     << (pipeline.active() ? "another in each steady step of the pipeline" : "the one before")
                     << ", their expert-parallel all-to-alls overlapping the other's computation"
                     << (tc.delay_wgrad_compute ? " and delayed weight gradients" : "") << "\n";
  }
  std::unique_ptr<PipelineRunner> pipe;
  if (pipeline.active()) {
    for (int64_t b = tc.rampup.on() ? tc.rampup.start : gbs; b <= gbs; b += tc.rampup.on() ? tc.rampup.increment : 1)
      pipeline_schedule(pp_size, pp_rank, b / (mbs * dp.size()), int64_t(chunks.size()));  // named errors, up front
    pipe = std::make_unique<PipelineRunner>(ex, chunks, *pipeline.comm(), ctx, tc.overlap_moe_expert_parallel_comm,
                                            timeline.get());
    info_stream(log) << "hytra: pipeline: " << pp_size << " stages, "
                     << (chunks.size() > 1 ? str("interleaved 1F1B (", chunks.size(), " model chunks a rank)")
                                           : std::string("1F1B"))
                     << " over " << tc.num_micro_batches() << " micro-batches a step\n";
  }
  MoeInterval moe_interval;
  std::vector<double> interval_mtp;  // per MTP depth, summed over the interval's steps
  ProgressBar progress("train", tc.train_iters, rank0 ? stderr : nullptr);

  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  auto t_interval = t_start;
  double interval_loss = 0, interval_gnorm = 0;
  std::optional<int64_t> interval_zeros;  // the last iteration's, as Megatron logs them
  std::optional<double> interval_params_norm;
  int64_t interval_iters = 0, interval_samples = 0, consumed = start.consumed_samples;
  if (start.iteration > 0)
    info_stream(log) << "hytra: resumed from " << tc.load << " at iteration " << start.iteration << " (" << consumed
                     << " samples consumed)\n";
  if (start.iteration >= tc.train_iters)
    info_stream(log) << "hytra: the checkpoint's iteration " << start.iteration << " is at or past --train-iters "
                     << tc.train_iters << ": nothing to train\n";
  const ExitSignal exit_signal(tc.exit_signal_handler);
  Allocator& device_alloc = allocator_for(dev);
  device_alloc.reset_peak();
  const int64_t held_before = device_alloc.stats().in_use;  // the parameters, gradients, optimizer state, data
  int64_t last_saved = -1;                                  // the iteration of the last checkpoint this run wrote
  // Writes a checkpoint of `iteration` (every rank takes part).
  const auto save_now = [&](int64_t iteration) {
    const auto t_save = Clock::now();
    const OptimizerState state = opt.state_for_save();  // a collective under the distributed optimizer
    // The first (expert-)data-parallel replica joins its tensor-parallel shards on its first tensor-parallel rank,
    // then (expert parallelism) its experts on its first expert-parallel rank; the first pipeline's stages then
    // hand theirs to rank 0, which writes the checkpoint.
    std::vector<ParamState> states = param_states(store, state);
    if (ep.on() ? par->edp->rank() == 0 : dp.rank() == 0) {
      states = join_shards(std::move(states), store, tp.comm);
      if (ep.on() && tp.rank == 0)
        states = in_order_of(whole, join_experts(std::move(states), store, ep.comm, [&](int s) {
                               return expert_params_of(mc, pp_size, pp_rank, ExpertParallel{nullptr, ep.size, s});
                             }));
      if (dp.rank() == 0 && tp.rank == 0) {
        const std::vector<ParamState> all = pipeline.gather_states(std::move(states), mc, copy);
        if (rank0) save_training_state(tc, all, state.step, {iteration, consumed, valid_consumed}, config_text, arch);
      }
    }
    if (tp.on()) tp.comm->barrier();
    pipeline.barrier();  // the checkpoint is complete before any rank goes on (or exits)
    dp.barrier();
    last_saved = iteration;
    info_stream(log) << "hytra: saved the checkpoint of iteration " << iteration << " to " << tc.save << " in "
                     << seconds_text(Clock::now() - t_save) << "\n";
    t_interval = Clock::now();
  };
  // The step counter of the learning-rate schedule: samples in a sample-based run, iterations otherwise.
  const auto schedule_step = [&](int64_t iteration, int64_t samples) {
    return tc.train_samples > 0 ? samples : iteration;
  };
  int64_t num_micro = tc.num_micro_batches_at(consumed);
  for (int64_t it = start.iteration + 1; it <= tc.train_iters; ++it) {
    const auto t_iter = Clock::now();
    const NvtxRange iteration_range("iteration");
    // The batch-size ramp (Megatron's update_num_microbatches): a checkpoint before the first larger step.
    const int64_t step_batch = tc.global_batch_at(consumed);
    if (tc.num_micro_batches_at(consumed) != num_micro) {
      info_stream(log) << "hytra: ramping up batch size from " << (num_micro * mbs * dp.size()) << " to " << step_batch
                       << "\n";
      if (!tc.save.empty() && it > 1 && last_saved != it - 1) save_now(it - 1);
      num_micro = tc.num_micro_batches_at(consumed);
    }
    const double lr = lr_at(lr_cfg, schedule_step(it - 1, consumed));  // iteration 1 trains at the warmup init lr
    store.zero_grad(/*lazy=*/true);           // the Linear weights' first wgrad GEMM overwrites instead
    // Each micro-batch's gradient is scaled by 1 / (micro-batches x data-parallel ranks): the sum over the
    // ranks is the mean over the global batch.
    if (pipe || combined) {
      std::vector<Batch> batches;
      for (int64_t m = 0; m < num_micro; ++m)
        batches.push_back(load_batch(*train_data, dp.sample(consumed, m, mbs), mbs));
      const auto before_backward = [&](bool last) { opt.begin_micro_batch(last); };
      if (pipe)
        pipe->train_step(batches, num_micro * dp.size(), before_backward);
      else
        combined->train_step(batches, num_micro * dp.size(), before_backward);
    } else {
      for (int64_t m = 0; m < num_micro; ++m) {
        const bool last = m == num_micro - 1;
        opt.begin_micro_batch(last);
        runner.queue(load_batch(*train_data, dp.sample(consumed, m, mbs), mbs), num_micro * dp.size(), true, m == 0,
                     opt.communicates_in(m == 0, last));
      }
    }
    const double loss = dp.mean(pipe ? pipe->mean_loss() : combined ? combined->mean_loss() : runner.mean_loss());
    // MoE: the step's routing statistics, then the expert-bias update (Megatron: finalize_model_grads).
    std::vector<MoeStats> mine;  // this rank's MoE layers, chunk by chunk
    for (HybridModel* c : chunks) {
      const std::vector<MoeStats> s = c->moe_stats();
      mine.insert(mine.end(), s.begin(), s.end());
    }
    const std::vector<MoeStats> moe = dp.sum(mine);
    const std::vector<MoeStats> all_moe = pipeline.gather(moe);  // every stage's layers (rank 0 logs them)
    moe_interval.add(all_moe, mc);
    const std::vector<double> mtp =
        dp.mean(pipeline.from_last(chunks.back()->mtp_losses(), size_t(model.plan().mtp_depths)));
    interval_mtp.resize(mtp.size(), 0.0);
    for (size_t k = 0; k < mtp.size(); ++k) interval_mtp[k] += mtp[k];
    for (size_t c = 0, at = 0; c < chunks.size(); ++c) {  // each chunk's part of the reduced statistics
      const size_t n = chunks[c]->moe_stats().size();
      const std::vector<MoeStats> part(moe.begin() + std::ptrdiff_t(at), moe.begin() + std::ptrdiff_t(at + n));
      chunks[c]->finish_step(dp.size() > 1 ? &part : nullptr);
      at += n;
    }
    store.finish_grads();
    pipeline.sync_embedding(store, shares_embedding);
    double gnorm = 0;
    {
      const NvtxRange range("gradient reduction");
      gnorm = opt.reduce_gradients(ex);
    }
    if (tc.check_for_nan_in_loss_and_grad && !(std::isfinite(loss) && std::isfinite(gnorm))) {
      std::vector<Batch> batches;  // this rank's micro-batches of the step, for the report's rerun
      for (int64_t m = 0; m < num_micro; ++m)
        batches.push_back(load_batch(*train_data, dp.sample(consumed, m, mbs), mbs));
      const std::string report = non_finite_report(ex, model, !pipeline.active(), batches, num_micro * dp.size());
      fail(str("iteration ", it, ": ", std::isfinite(loss) ? "gradient norm" : "loss", " is not finite (loss ", loss,
               ", grad norm ", gnorm, "); ", report, ". Stopping: try a lower --lr or check the data."));
    }
    // As Megatron: the zeros of the reduced gradients before the step, the weights' norm after it.
    std::optional<int64_t> grad_zeros;
    if (tc.log_num_zeros_in_grad) grad_zeros = opt.grad_zeros(ex);
    {
      const NvtxRange range("optimizer step");
      opt.step(ex, lr, clip_coefficient(gnorm, tc.clip_grad));
    }
    std::optional<double> params_norm;
    if (tc.log_params_norm) params_norm = opt.params_norm(ex);
    consumed += step_batch;
    ex.synchronize();  // the step's device work is done: its wall time is exact (bench reads it)
    result.iter_seconds.push_back(std::chrono::duration<double>(Clock::now() - t_iter).count());
    if (timeline) log << ep_overlap_line(it, timeline->last()) << "\n";
    result.losses.push_back(loss);
    result.grad_norms.push_back(gnorm);
    if (tensorboard && it % tc.tensorboard_log_interval == 0) {
      // Megatron's training scalars of this iteration, each also against the consumed samples ("<tag> vs samples").
      std::vector<NamedValue> at_iteration, at_samples;
      auto both = [&](const std::string& tag, double v) {
        at_iteration.push_back({tag, v});
        at_samples.push_back({tag + " vs samples", v});
      };
      if (tc.log_learning_rate_to_tensorboard) both("learning-rate", lr_at(lr_cfg, schedule_step(it, consumed)));
      if (tc.log_batch_size_to_tensorboard) both("batch-size", double(step_batch));
      both("lm loss", loss);
      if (tc.log_loss_scale_to_tensorboard) both("loss-scale", 1.0);
      if (tc.log_world_size_to_tensorboard) both("world-size", double(dp.size() * pp_size * tp.size));
      both("grad-norm", gnorm);
      if (grad_zeros) both("num-zeros", double(*grad_zeros));
      if (params_norm) both("params-norm", *params_norm);
      if (tc.log_memory_to_tensorboard) {
        const MemoryStats m = device_alloc.stats();
        at_iteration.push_back({"mem-reserved-bytes", double(m.reserved)});
        at_iteration.push_back({"mem-allocated-bytes", double(m.in_use)});
        at_iteration.push_back({"mem-max-allocated-bytes", double(m.peak)});
      }
      for (size_t k = 0; k < mtp.size(); ++k)
        at_iteration.push_back({"mtp_" + std::to_string(k + 1) + " loss", mtp[k]});
      MoeInterval this_step;  // the MoE auxiliary losses of this iteration, as the log line's names
      this_step.add(all_moe, mc);
      IterationLog moe_rec;
      this_step.fill(moe_rec, mc);
      for (const auto& [name, v] : moe_rec.moe_metrics) {
        at_iteration.push_back({name, v});
        if (!tc.moe_per_layer_logging) continue;
        for (const MoeLayerLog& l : moe_rec.moe_layers)
          at_iteration.push_back({"moe/" + name + "_layer_" + std::to_string(l.layer - 1),
                                  name == "z_loss" ? l.z_loss : l.load_balancing_loss});
      }
      tensorboard->scalars(it, at_iteration);
      tensorboard->scalars(consumed, at_samples);
    }
    interval_loss += loss;
    interval_gnorm = gnorm;
    interval_zeros = grad_zeros;
    interval_params_norm = params_norm;
    ++interval_iters;
    interval_samples += step_batch;
    progress.update(it);

    if (it % tc.log_interval == 0 || it == tc.train_iters) {
      ex.synchronize();
      const auto now = Clock::now();
      const double secs = std::chrono::duration<double>(now - t_interval).count();
      const double tokens = double(interval_samples * mc.seq_length);
      IterationLog rec;
      rec.time = log_timestamp_now();
      rec.iteration = it;
      rec.train_iters = tc.train_iters;
      rec.consumed_samples = consumed;
      rec.ms_per_iter = 1e3 * secs / double(interval_iters);
      rec.tokens_per_s = tokens / secs;
      // Per rank (the world: data-parallel x tensor-parallel x pipeline ranks), as Megatron.
      const double tflops_per_gpu = flops_token * tokens / secs / 1e12 / double(dp.size() * pp_size * tp.size);
      if (tc.log_throughput) rec.tflops_per_gpu = tflops_per_gpu;
      rec.lr = lr_at(lr_cfg, schedule_step(it, consumed));  // Megatron logs the rate after this step's scheduler step
      rec.global_batch_size = step_batch;
      rec.losses = {{"lm loss", interval_loss / double(interval_iters)}};
      for (size_t k = 0; k < interval_mtp.size(); ++k) {  // Megatron's per-depth names
        rec.losses.push_back({"mtp_" + std::to_string(k + 1) + " loss", interval_mtp[k] / double(interval_iters)});
        interval_mtp[k] = 0;
      }
      moe_interval.fill(rec, mc);
      rec.grad_norm = interval_gnorm;
      rec.num_zeros = interval_zeros;
      rec.params_norm = interval_params_norm;
      if (progress.enabled()) std::fputs("\r\033[K", stderr);
      log << format_iteration_line(rec) << "\n" << std::flush;
      if (jsonl) jsonl->write(rec);
      if (tensorboard &&
          tc.log_timers_to_tensorboard) {  // the interval's timing, as Megatron writes it at its log lines
        std::vector<NamedValue> timing = {{"iteration-time", rec.ms_per_iter / 1e3}};
        if (tc.log_throughput) timing.push_back({"throughput", tflops_per_gpu});
        tensorboard->scalars(it, timing);
      }
      interval_loss = 0;
      interval_iters = 0;
      interval_samples = 0;
      t_interval = Clock::now();
    }
    if (tc.eval_interval > 0 && tc.eval_iters > 0 && (it % tc.eval_interval == 0 || it == tc.train_iters)) {
      const double vl = validate_loss(runner, pipe.get(), *valid_data, valid_consumed, tc, dp);
      valid_consumed += tc.eval_iters * gbs;
      result.val_losses.push_back(vl);
      log << format_validation_block(it, {{"lm loss", vl}}) << std::flush;
      if (jsonl) jsonl->write_validation(it, {{"lm loss", vl}});
      if (tensorboard) {
        std::vector<NamedValue> at_iteration = {{"lm loss validation", vl}}, at_samples;
        if (tc.log_validation_ppl_to_tensorboard)
          at_iteration.push_back({"lm loss validation ppl", std::exp(std::min(20.0, vl))});  // Megatron's cap
        for (const auto& [tag, v] : at_iteration) at_samples.push_back({tag + " vs samples", v});
        tensorboard->scalars(it, at_iteration);
        tensorboard->scalars(consumed, at_samples);
      }
      t_interval = Clock::now();  // validation time is not training time
    }
    const bool at_exit_interval = tc.exit_interval > 0 && it % tc.exit_interval == 0;
    const bool signalled = tc.exit_signal_handler && any_rank(par, exit_signal.received());
    const bool exiting = at_exit_interval || signalled;
    if (!tc.save.empty() && ((tc.save_interval > 0 && it % tc.save_interval == 0) || it == tc.train_iters || exiting))
      save_now(it);
    if (exiting) {
      info_stream(log) << "hytra: exiting at iteration " << it
                       << (signalled ? std::string(" (SIGTERM received, --exit-signal-handler)")
                                     : str(" (--exit-interval ", tc.exit_interval, ")"))
                       << (signalled && !tc.save.empty() ? str(", saved in ", tc.save) : std::string()) << "\n";
      break;
    }
  }
  opt.finish_gather();  // the last step's parameters complete on every rank
  progress.finish();
  result.peak_memory_bytes = device_alloc.stats().peak;
  {  // rank 0's in a multi-process run
    char line[160];
    std::snprintf(line, sizeof line,
                  "hytra: rank 0 memory: %.2f MiB before the first step, peak %.2f MiB (%.2f MiB of "
                  "activations and workspace)\n",
                  double(held_before) / 1048576.0, double(result.peak_memory_bytes) / 1048576.0,
                  double(result.peak_memory_bytes - held_before) / 1048576.0);
    info_stream(log) << line;
  }
  result.flops_per_token = flops_token;
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  result.graph_replays = runner.replays();
  return result;
}

}  // namespace hytra
