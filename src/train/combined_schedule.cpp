#include "train/combined_schedule.h"

#include <optional>

#include "core/error.h"
#include "core/fiber.h"
#include "ops/ops.h"
#include "train/micro_batch.h"

namespace hytra {

std::vector<std::string> ep_overlap_errors(const ModelConfig& cfg, const LayerCounts& counts, int pipeline_size) {
  std::vector<std::string> errs;
  if (counts.of('E') == 0) errs.push_back("the model has no MoE layers (E) whose communication it would overlap");
  if (cfg.recompute_granularity == RecomputeGranularity::Full)
    errs.push_back("--recompute-granularity full: not with the EP-overlap schedule (as Megatron)");
  if (cfg.recompute_granularity == RecomputeGranularity::Selective)
    for (RecomputeModule m : cfg.recompute_modules)
      if (m == RecomputeModule::Moe)
        errs.push_back("--recompute-modules moe: not with the EP-overlap schedule (as Megatron)");
  if (pipeline_size > 1)
    errs.push_back("--pipeline-model-parallel-size " + std::to_string(pipeline_size) +
                   ": the EP-overlap schedule inside the pipeline's 1F1B is not built yet (use 1)");
  return errs;
}

// One micro-batch's forward or backward as a fiber that pauses at each hand-over point and notes which.
class CombinedSchedule::Pass : public HandoverHook {
 public:
  Pass(StepContext& ctx, std::function<void()> body) : ctx_(ctx), fiber_(std::move(body)) { ctx_.handover_hook = this; }
  ~Pass() override { ctx_.handover_hook = nullptr; }
  void reached(Handover h) override {
    at_ = h;
    Fiber::yield();
  }
  // Runs to the next hand-over point: returns it, or nothing at the pass's end.
  std::optional<Handover> resume() {
    at_.reset();
    fiber_.resume();
    return fiber_.done() ? std::nullopt : at_;
  }
  bool done() const { return fiber_.done(); }

 private:
  StepContext& ctx_;
  Fiber fiber_;
  std::optional<Handover> at_;
};

CombinedSchedule::CombinedSchedule(Exec& ex, HybridModel& model, const StepContext& settings, bool timeline,
                                   dist::Communicator* ep)
    : ex_(ex), model_(model), settings_(settings) {
  if (timeline) timeline_ = std::make_unique<OverlapTimeline>(ex, ep);
  for (auto& c : ctx_) c = std::make_unique<StepContext>(ex);
}

CombinedSchedule::~CombinedSchedule() = default;

void CombinedSchedule::turn(Pass& pass, Handover expected, bool end_allowed) {
  if (timeline_) timeline_->begin_turn();
  const std::optional<Handover> at = pass.resume();
  if (timeline_) timeline_->end_turn();
  HYTRA_ASSERT(at == expected || (end_allowed && !at), "EP-overlap schedule: a pass stopped ",
               at ? handover_name(*at) : "at its end", " where the schedule expected it ", handover_name(expected));
}

void CombinedSchedule::finish(Pass& pass) {
  while (!pass.done()) {
    if (timeline_) timeline_->begin_turn();
    pass.resume();
    if (timeline_) timeline_->end_turn();
  }
}

// docs/spec/ep_overlap.md §2 and §3: the backward runs its post-process (the loss gradient, the head and the layers
// after the last MoE layer) to the first MoE layer it meets; then, per pair of MoE layers, the seven turns; the
// forward's remaining layers and head come last.
void CombinedSchedule::run_pair(Pass* forward, Pass* backward) {
  if (backward == nullptr) return finish(*forward);
  if (forward == nullptr) return finish(*backward);
  turn(*backward, Handover::BeforeCombineBackward);
  while (!backward->done()) {
    turn(*backward, Handover::BeforeExpertsBackward);
    turn(*forward, Handover::BeforeDispatch);
    turn(*backward, Handover::BeforeDispatchBackward);
    turn(*forward, Handover::BeforeExperts);
    turn(*backward, Handover::BeforePreDispatchBackward);
    turn(*forward, Handover::AfterCombine);
    turn(*backward, Handover::BeforeCombineBackward, /*end_allowed=*/true);
  }
  finish(*forward);
}

void CombinedSchedule::train_step(const std::vector<Batch>& batches, int64_t num_micro,
                                  const std::function<void(bool last)>& before_backward) {
  const int64_t M = int64_t(batches.size());
  const DType loss_dtype = stat_dtype(model_.params().flat_values().dtype());
  std::vector<Tensor> loss_grad(batches.size());
  if (timeline_) timeline_->begin_step();
  for (int64_t k = 0; k <= M; ++k) {
    std::optional<Pass> forward, backward;
    if (k < M) {  // micro-batch k's forward
      const Batch& b = batches[size_t(k)];
      StepContext& c = *ctx_[k % 2];
      c.clear();
      c.grad_enabled = true;
      c.aux_loss_scale = 1.0 / double(num_micro);
      c.delay_wgrad = settings_.delay_wgrad;
      c.wgrad_in_slots = true;
      c.param_hooks = settings_.param_hooks;
      loss_grad[size_t(k)] = to_device_async(ex_, loss_gradient(b, num_micro, loss_dtype));
      c.loss_grad = loss_grad[size_t(k)];
      denoms_.push_back(double(std::max<int64_t>(b.num_targets, 1)));
      const Tensor ids = to_device_async(ex_, b.ids), labels = to_device_async(ex_, b.labels);
      forward.emplace(c, [this, &c, ids, labels] {
        const Tensor losses = model_.forward(c, ids, labels);
        Tensor total = Tensor::empty({1}, losses.dtype(), losses.device());
        ops::sum(ex_, total, losses);
        totals_.push_back(total);
      });
    }
    if (k > 0) {  // micro-batch k-1's backward
      before_backward(k == M);
      StepContext& c = *ctx_[(k - 1) % 2];
      const Tensor grad = loss_grad[size_t(k - 1)];
      backward.emplace(c, [this, &c, grad] {
        model_.backward(c, grad);
        if (c.delay_wgrad) model_.backward_dw(c);
      });
    }
    run_pair(forward ? &*forward : nullptr, backward ? &*backward : nullptr);
    if (k > 0) ctx_[(k - 1) % 2]->clear();  // that micro-batch's saved tensors are done with
  }
  if (timeline_) timeline_->end_step();
}

double CombinedSchedule::mean_loss() { return mean_micro_batch_loss(ex_, totals_, denoms_); }

}  // namespace hytra
