// MicroBatchRunner: queues micro-batches — forward and, in training, backward — on the executor.
// The loss of a micro-batch is the mean over its target tokens, its gradients are scaled by
// 1/num_micro (a step's gradient is the mean over its micro-batches). The per-token loss gradient
// depends only on the labels, so it is set before the forward (ctx.loss_grad: the LM head computes its
// gradients there). Nothing waits for the device per micro-batch: inputs are copied asynchronously,
// each loss stays on the device until mean_loss() reads them all at once, so the host prepares the
// next micro-batch while the GPU runs this one.
//
// CUDA graphs (issue "the step captured as a CUDA graph where possible"): on a CUDA device, unless
// --no-cuda-graph or the model needs host work per micro-batch (HybridModel::graph_blocker), the
// first training micro-batch runs eagerly (cuDNN plans, cuBLASLt algorithms and workspaces get
// built), the next one of each kind is captured (core/cuda_graph.h) and every later one is
// a replay: ids, labels and the loss gradient are copied into the buffers the capture read. Two
// kinds: the step's first micro-batch (its Linear wgrad GEMMs overwrite the lazily zeroed
// gradients, ParamStore::zero_grad(lazy)) and the others (they accumulate). A replay runs the very
// kernels of the eager path, so results are bitwise those of --no-cuda-graph.
#pragma once
#include <array>
#include <ostream>
#include <string>
#include <vector>

#include "core/cuda_graph.h"
#include "core/tensor.h"
#include "data/loader.h"
#include "model/hybrid_model.h"
#include "nn/context.h"
#include "ops/exec.h"

namespace hytra {

// d(step loss)/d(per-token loss) of micro-batch `b` (B,T): 1 / (its targets x num_micro) at its targets, 0
// elsewhere (host, `dtype`).
Tensor loss_gradient(const Batch& b, int64_t num_micro, DType dtype);

// A host tensor on ex's device: itself on the CPU, an asynchronous copy on CUDA (the host memory is staged at once).
Tensor to_device_async(Exec& ex, const Tensor& host);
// The mean over the queued micro-batches of (loss sum / target count): the sums (one element each, on the device)
// read in one wait. Empties both lists.
double mean_micro_batch_loss(Exec& ex, std::vector<Tensor>& totals, std::vector<double>& denoms);

class MicroBatchRunner {
 public:
  // graphs_off: why the caller runs without CUDA graphs (e.g. "--no-cuda-graph"; empty: it allows them); the runner
  // also checks the device and model and logs whether graphs are used.
  MicroBatchRunner(Exec& ex, HybridModel& model, StepContext& ctx, const std::string& graphs_off, std::ostream& log);

  // Queues one micro-batch; with `backward` its gradients are accumulated (first_in_step: the first
  // micro-batch of the optimizer step). `eager`: not as a graph (the data-parallel overlap communicates in it).
  void queue(const Batch& b, int64_t num_micro, bool backward, bool first_in_step, bool eager = false);
  // The mean of the losses of the micro-batches queued since the last call (waits for them).
  double mean_loss();
  int64_t replays() const { return replays_; }

 private:
  // Queues forward (+ backward) on the executor; returns the sum of the per-token losses (device).
  Tensor queue_model(const Tensor& ids, const Tensor& labels, const Tensor& loss_grad, int64_t num_micro,
                     bool backward);
  std::vector<bool> stale_flags() const;
  void set_stale_flags(const std::vector<bool>& flags);

  struct Graph {
    CudaGraph graph;
    Tensor total;                       // the replay's loss sum
    std::vector<bool> stale_before;     // Param::grad_stale at capture (checked at every replay)
    std::vector<bool> stale_after;      // ... after it: what a replay leaves
  };
  static constexpr int kPool = 1;       // the allocator pool of the captured graphs

  Exec& ex_;
  HybridModel& model_;
  StepContext& ctx_;
  bool graphs_ = false;
  bool warmed_ = false;                 // one eager training micro-batch has run
  Tensor ids_, labels_, loss_grad_;     // the graphs' input buffers
  std::array<Graph, 2> graph_;          // [0] first micro-batch of a step, [1] the others
  int64_t replays_ = 0;
  std::vector<Tensor> totals_;          // per queued micro-batch: its loss sum (device, one element)
  std::vector<double> denoms_;          // ... and its target-token count
};

}  // namespace hytra
