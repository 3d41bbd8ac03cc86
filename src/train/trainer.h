// The training loop: micro-batches with gradient accumulation to the global batch, AdamW on fp32
// master weights, global-norm clipping, Megatron's LR schedule, NaN/Inf stop, validation, and the
// Megatron-style log line plus a JSONL metrics file.
// Loss convention (Megatron, calculate_per_token_loss off): each micro-batch's loss is the mean over
// its target tokens; the step's gradient is the mean of the micro-batch gradients.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "model/config.h"
#include "train/train_config.h"

namespace hytra::dist {
struct ParallelContext;
}

namespace hytra {

struct TrainResult {
  std::vector<double> losses;        // lm loss of every iteration (mean over its micro-batches)
  std::vector<double> grad_norms;    // before clipping
  std::vector<double> val_losses;    // each validation's lm loss, in order
  std::vector<double> iter_seconds;  // wall time of every iteration (device work included)
  int64_t num_params = 0;
  int64_t peak_memory_bytes = 0;  // allocator peak on the training device over the run
  double flops_per_token = 0.0;   // model FLOPs per token (model/flops.h)
  double seconds = 0.0;
  int64_t graph_replays = 0;  // micro-batches run as a CUDA-graph replay (train/micro_batch.h)
};

// Runs the whole training job; log lines go to `log` (stdout in the CLI). `par`: this rank's communicators
// in a multi-process run (docs/parallelism.md; nullptr: one process). Data parallelism: each rank runs its
// micro-batches of the global batch (Megatron's order: rank r takes samples [r mbs, (r + 1) mbs) of each
// group of mbs x dp), the gradients, losses and routing statistics are summed over the ranks, and every rank
// applies the same update; rank 0 alone writes checkpoints.
TrainResult train(const ModelConfig& model_cfg, const TrainConfig& train_cfg, std::ostream& log,
                  dist::ParallelContext* par = nullptr);

}  // namespace hytra
