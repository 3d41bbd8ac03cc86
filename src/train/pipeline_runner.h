// PipelineRunner: one pipeline stage's part of a step (docs/parallelism.md "Pipeline parallelism"), in
// Megatron's 1F1B order (train/pipeline_schedule.h). Warm-up forwards, each receiving its hidden state from
// the stage before and sending its output to the stage after. Then forward / backward pairs: a forward's
// output goes out as the gradient for the oldest micro-batch comes in, and a backward's input gradient goes
// back as the next forward's input comes in. These are one exchange each (Communicator::send_recv), so the
// blocking transfers of two neighbours always match. Then the cool-down backwards.
// Interleaved (the pattern's pipes give each rank V > 1 model chunks, virtual stage chunk x P + rank): Megatron's
// interleaved 1F1B order of the M x V virtual micro-batches, each step's transfers one batch
// (Communicator::exchange): the forward's output to the next rank (the last rank's to the first, for its next
// chunk) with the next forward's input from the previous one, and the backward's input gradient to the previous
// rank with the next backward's output gradient from the next one, as Megatron's send_forward_backward_recv_...
// Every micro-batch in flight (of each chunk) keeps its saved tensors in a StepContext of its own. The last stage
// holds the losses; mean_loss() hands their mean to every stage. Runs eagerly (no CUDA graphs).
// Under the EP-overlap schedule (interleaved only, as Megatron) each steady step's forward and backward run as one
// pair of the combined 1F1B (train/combined_schedule.h), their transfers batched after both as before; the warm-up
// is one forward longer, as Megatron's (train/pipeline_schedule.h says why).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "dist/communicator.h"
#include "model/hybrid_model.h"
#include "nn/context.h"
#include "ops/exec.h"
#include "train/overlap_timeline.h"

namespace hytra {

class PipelineRunner {
 public:
  // `chunks`: this rank's model chunks, in chunk order (one without interleaving). `settings`: what each micro-batch's
  // StepContext copies (delayed weight gradients, the optimizer's hooks).
  // `ep_overlap`: run the steady steps as combined 1F1B pairs, `timeline` (may be null) marking their turns.
  PipelineRunner(Exec& ex, std::vector<HybridModel*> chunks, dist::Communicator& pp, const StepContext& settings,
                 bool ep_overlap = false, OverlapTimeline* timeline = nullptr);

  // Forward and backward of this data-parallel rank's micro-batches of a step (num_micro: the loss scale's
  // micro-batch count, as MicroBatchRunner's). before_backward(last): called before each backward, `last` for the
  // step's last one (interleaved: the first chunk's last, after every other chunk's).
  void train_step(const std::vector<Batch>& batches, int64_t num_micro,
                  const std::function<void(bool last)>& before_backward);
  // The forwards alone (validation).
  void evaluate(const std::vector<Batch>& batches);
  // The mean of the losses of the micro-batches run since the last call, on every stage (a collective).
  double mean_loss();

 private:
  StepContext& context(int64_t slot);  // micro-batch slot's, created on first use
  Tensor forward(int64_t slot, const Batch& b, const Tensor& input, int64_t num_micro, bool train, size_t chunk = 0);
  Tensor backward(int64_t slot, const Tensor& output_grad, size_t chunk = 0);
  void train_interleaved(const std::vector<Batch>& batches, int64_t num_micro,
                         const std::function<void(bool last)>& before_backward);
  void evaluate_interleaved(const std::vector<Batch>& batches);
  // A fresh tensor for a received hidden state (mHC: the streams) or its gradient.
  Tensor hidden_buffer(const Batch& b) const;
  Tensor recv_forward(const Batch& b);
  void send_forward(const Tensor& out);
  Tensor send_forward_recv_backward(const Tensor& out, const Batch& b);
  Tensor recv_backward(const Batch& b);
  void send_backward(const Tensor& grad);
  Tensor send_backward_recv_forward(const Tensor& grad, const Batch& b);

  Exec& ex_;
  std::vector<HybridModel*> chunks_;
  HybridModel& model_;  // the first chunk
  dist::Communicator& pp_;
  const StepContext& settings_;
  bool ep_overlap_;
  OverlapTimeline* timeline_;
  bool first_, last_;
  std::vector<std::unique_ptr<StepContext>> ctx_;  // per micro-batch of the step
  std::vector<Tensor> totals_;                     // the last stage: per micro-batch, its loss sum (one element)
  std::vector<double> denoms_;                     // ... and its target count
};

}  // namespace hytra
