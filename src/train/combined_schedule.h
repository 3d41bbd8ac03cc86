// CombinedSchedule: Megatron's EP-overlap combined 1F1B (--overlap-moe-expert-parallel-comm; docs/spec/ep_overlap.md,
// docs/parallelism.md "The EP-overlap schedule"). A step's micro-batches run in pairs: micro-batch 0's forward
// alone, then the forward of k interleaved with the backward of k-1 for k = 1 .. M-1, then the backward of M-1 alone.
// Within a pair the two passes take turns at the MoE layers' hand-over points (nn/context.h), in the order of
// ep_overlap.md §2: for forward layer f and backward layer b (paired last-first)
//   b: combine backward [comm] | f: pre-dispatch [comp] | b: experts backward [comp] | f: dispatch [comm] |
//   b: experts' wgrad [comp], dispatch backward [comm] | f: experts [comp], combine [comm] |
//   b: pre-dispatch backward and its layers' wgrad [comp]
// so each pass's all-to-alls (started on the communicator's stream, waited for only by that pass's next step) run
// while the other pass computes. Each pass is a Fiber (core/fiber.h) running the model's ordinary forward or
// backward; every op gets the inputs it gets in the plain schedule, so losses and gradients are bitwise the same.
// The MoE layers of the forward are paired with those of the backward in reverse; what lies between them (dense,
// Mamba, attention layers, the embedding and the head) runs in the pre-dispatch step that ends at the next MoE layer.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "dist/communicator.h"
#include "model/hybrid_model.h"
#include "nn/context.h"
#include "ops/exec.h"
#include "train/overlap_timeline.h"

namespace hytra {

// Why the EP-overlap schedule cannot run a model (empty: it can). As Megatron: no full recompute and no selective
// "moe" recompute (a rerun of a whole MoE layer inside the backward would cross the hand-over points); with pipeline
// parallelism only the interleaved schedule (`chunks` > 1 model chunks a rank). hytra also runs it with one
// expert-parallel rank (to measure the schedule itself), in fp32 and with any number of MTP depths, which Megatron
// refuses.
std::vector<std::string> ep_overlap_errors(const ModelConfig& cfg, const LayerCounts& counts, int pipeline_size,
                                           int64_t chunks);

// One pair of the combined 1F1B: a micro-batch's forward (`forward`, its StepContext `forward_ctx`) and another's
// backward run as two fibers taking turns at the MoE layers' hand-over points (docs/spec/ep_overlap.md §2, §3). The
// forward's MoE layers are paired with the backward's last-first; when one pass has no MoE layer left, the other runs
// to its end alone, the backward first. Either pass may be empty (the other runs alone). `timeline` (may be null)
// marks each turn.
void run_combined_pair(OverlapTimeline* timeline, StepContext& forward_ctx, const std::function<void()>& forward,
                       StepContext& backward_ctx, const std::function<void()>& backward);

class CombinedSchedule {
 public:
  // `settings`: what each micro-batch's StepContext copies (delayed weight gradients, the optimizer's hooks).
  // `timeline` (may be null): measures each step at the cost of events.
  CombinedSchedule(Exec& ex, HybridModel& model, const StepContext& settings, OverlapTimeline* timeline);
  ~CombinedSchedule();

  // Forward and backward of a step's micro-batches (num_micro: the loss scale's micro-batch count, as
  // MicroBatchRunner's). before_backward(last): called before each backward, `last` for the step's last one.
  void train_step(const std::vector<Batch>& batches, int64_t num_micro,
                  const std::function<void(bool last)>& before_backward);
  // The mean of the losses of the micro-batches run since the last call (waits for them).
  double mean_loss();

 private:
  Exec& ex_;
  HybridModel& model_;
  const StepContext& settings_;
  OverlapTimeline* timeline_;
  std::unique_ptr<StepContext> ctx_[2];  // micro-batch k's in ctx_[k % 2]
  std::vector<Tensor> totals_;           // per micro-batch: its loss sum (device, one element)
  std::vector<double> denoms_;           // ... and its target-token count
};

}  // namespace hytra
