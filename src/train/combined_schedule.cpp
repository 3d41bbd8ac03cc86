#include "train/combined_schedule.h"

#include <optional>

#include "core/error.h"
#include "core/fiber.h"
#include "ops/ops.h"
#include "train/micro_batch.h"

namespace hytra {

std::vector<std::string> ep_overlap_errors(const ModelConfig& cfg, const LayerCounts& counts, int pipeline_size,
                                           int64_t chunks) {
  std::vector<std::string> errs;
  if (counts.of('E') == 0) errs.push_back("the model has no MoE layers (E) whose communication it would overlap");
  if (cfg.recompute_granularity == RecomputeGranularity::Full)
    errs.push_back("--recompute-granularity full: not with the EP-overlap schedule (as Megatron)");
  if (cfg.recompute_granularity == RecomputeGranularity::Selective)
    for (RecomputeModule m : cfg.recompute_modules)
      if (m == RecomputeModule::Moe)
        errs.push_back("--recompute-modules moe: not with the EP-overlap schedule (as Megatron)");
  if (pipeline_size > 1 && chunks == 1)
    errs.push_back("--pipeline-model-parallel-size " + std::to_string(pipeline_size) +
                   " without virtual pipeline stages: the EP-overlap schedule runs inside the interleaved 1F1B only "
                   "(as Megatron); give each rank several model chunks with the pattern's pipes (|)");
  return errs;
}

namespace {

// One micro-batch's forward or backward as a fiber that pauses at each hand-over point and notes which.
class Pass : public HandoverHook {
 public:
  Pass(StepContext& ctx, const std::function<void()>& body) : ctx_(ctx), fiber_(body) { ctx_.handover_hook = this; }
  ~Pass() override { ctx_.handover_hook = nullptr; }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;
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

// Runs `pass` to its next hand-over point, which must be `expected`; returns false if it ended instead, which only a
// pass between two MoE layers may (`end_allowed`).
bool turn(OverlapTimeline* timeline, Pass& pass, Handover expected, bool end_allowed) {
  if (timeline != nullptr) timeline->begin_turn();
  const std::optional<Handover> at = pass.resume();
  if (timeline != nullptr) timeline->end_turn();
  HYTRA_ASSERT(at == expected || (end_allowed && !at), "EP-overlap schedule: a pass stopped ",
               at ? handover_name(*at) : "at its end", " where the schedule expected it ", handover_name(expected));
  return at.has_value();
}

void finish(OverlapTimeline* timeline, Pass& pass) {
  while (!pass.done()) {
    if (timeline != nullptr) timeline->begin_turn();
    pass.resume();
    if (timeline != nullptr) timeline->end_turn();
  }
}

}  // namespace

// docs/spec/ep_overlap.md §2 and §3: the backward runs its post-process (the loss gradient, the head and the layers
// after the last MoE layer) to the first MoE layer it meets; then, per pair of MoE layers, the seven turns; the
// remaining layers of the backward, then of the forward (with its head), come last.
void run_combined_pair(OverlapTimeline* timeline, StepContext& forward_ctx, const std::function<void()>& forward,
                       StepContext& backward_ctx, const std::function<void()>& backward) {
  std::optional<Pass> f, b;
  if (forward) f.emplace(forward_ctx, forward);
  if (backward) b.emplace(backward_ctx, backward);
  if (f && b && turn(timeline, *b, Handover::BeforeCombineBackward, true)) {
    for (;;) {
      turn(timeline, *b, Handover::BeforeExpertsBackward, false);
      if (!turn(timeline, *f, Handover::BeforeDispatch, true)) break;  // the forward has no MoE layer left
      turn(timeline, *b, Handover::BeforeDispatchBackward, false);
      turn(timeline, *f, Handover::BeforeExperts, false);
      turn(timeline, *b, Handover::BeforePreDispatchBackward, false);
      turn(timeline, *f, Handover::AfterCombine, false);
      if (!turn(timeline, *b, Handover::BeforeCombineBackward, true)) break;
    }
  }
  if (b) finish(timeline, *b);
  if (f) finish(timeline, *f);
}

CombinedSchedule::CombinedSchedule(Exec& ex, HybridModel& model, const StepContext& settings, OverlapTimeline* timeline)
    : ex_(ex), model_(model), settings_(settings), timeline_(timeline) {
  for (auto& c : ctx_) c = std::make_unique<StepContext>(ex);
}

CombinedSchedule::~CombinedSchedule() = default;

void CombinedSchedule::train_step(const std::vector<Batch>& batches, int64_t num_micro,
                                  const std::function<void(bool last)>& before_backward) {
  const int64_t M = int64_t(batches.size());
  const DType loss_dtype = stat_dtype(model_.params().flat_values().dtype());
  std::vector<Tensor> loss_grad(batches.size());
  if (timeline_) timeline_->begin_step();
  for (int64_t k = 0; k <= M; ++k) {
    std::function<void()> forward, backward;
    StepContext& fc = *ctx_[k % 2];
    StepContext& bc = *ctx_[(k + 1) % 2];  // micro-batch k-1's
    if (k < M) {  // micro-batch k's forward
      const Batch& b = batches[size_t(k)];
      fc.clear();
      fc.grad_enabled = true;
      fc.aux_loss_scale = 1.0 / double(num_micro);
      fc.delay_wgrad = settings_.delay_wgrad;
      fc.wgrad_in_slots = true;
      fc.param_hooks = settings_.param_hooks;
      loss_grad[size_t(k)] = to_device_async(ex_, loss_gradient(b, num_micro, loss_dtype));
      fc.loss_grad = loss_grad[size_t(k)];
      denoms_.push_back(double(std::max<int64_t>(b.num_targets, 1)));
      const Tensor ids = to_device_async(ex_, b.ids), labels = to_device_async(ex_, b.labels);
      forward = [this, &fc, ids, labels] {
        const Tensor losses = model_.forward(fc, ids, labels);
        Tensor total = Tensor::empty({1}, losses.dtype(), losses.device());
        ops::sum(ex_, total, losses);
        totals_.push_back(total);
      };
    }
    if (k > 0) {  // micro-batch k-1's backward
      before_backward(k == M);
      const Tensor grad = loss_grad[size_t(k - 1)];
      backward = [this, &bc, grad] {
        model_.backward(bc, grad);
        if (bc.delay_wgrad) model_.backward_dw(bc);
      };
    }
    run_combined_pair(timeline_, fc, forward, bc, backward);
    if (k > 0) bc.clear();  // that micro-batch's saved tensors are done with
  }
  if (timeline_) timeline_->end_step();
}

double CombinedSchedule::mean_loss() { return mean_micro_batch_loss(ex_, totals_, denoms_); }

}  // namespace hytra
