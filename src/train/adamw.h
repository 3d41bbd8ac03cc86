// AdamW over a model's parameters: fp32 moments m and v per parameter (one flat buffer each, laid
// out like the parameter buffer), weight decay skipped for no_decay parameters (norms, biases). With a
// shard (the distributed optimizer, train/distributed_optimizer.h) it updates only some parts of the flat
// buffers and holds the moments of those parts alone, one after the other.
// Multi-tensor: one ops::adamw launch per span of consecutive parameters that share a weight
// decay (a handful per layer), over the fp32 master weights; in bf16 runs the same launch writes
// the updated bf16 values.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "nn/param.h"
#include "ops/exec.h"

namespace hytra {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// The optimizer's part of a checkpoint: its step count and per-parameter moments (ParamStore::all() order).
struct OptimizerState {
  int64_t step = 0;
  std::vector<Tensor> exp_avg, exp_avg_sq;
};

// Per-parameter views (ParamStore::all() order) of a flat buffer laid out like the parameter buffer.
std::vector<Tensor> param_views(ParamStore& params, const Tensor& flat);

// Elements [begin, end) of the flat parameter buffers.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class AdamW {
 public:
  // `parts`: the ranges of the flat buffers to update, ascending and disjoint (empty: the whole buffers).
  AdamW(ParamStore& params, const AdamWConfig& cfg, std::vector<FlatRange> parts = {});
  // One update at learning rate lr with the gradients multiplied by grad_scale (the clip
  // coefficient); step counts from 1.
  void step(Exec& ex, double lr, double grad_scale = 1.0);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }  // resuming from a checkpoint
  // The step count and per-parameter views of the moments (an optimizer over the whole buffer only).
  OptimizerState state() const;
  // The moments of the parts, one after the other.
  Tensor& exp_avg_flat() { return m_flat_; }
  Tensor& exp_avg_sq_flat() { return v_flat_; }

 private:
  ParamStore& params_;
  AdamWConfig cfg_;
  std::vector<FlatRange> parts_;
  Tensor m_flat_, v_flat_;
  struct Span {
    int64_t offset, len;  // elements of the flat buffers
    int64_t moment;       // ... and its first element of the moments
    double weight_decay;
  };
  std::vector<Span> spans_;
  int64_t step_ = 0;
};

// Megatron's clip coefficient: clip / (norm + 1e-6) when clip > 0 and that is below 1, else 1
// (AdamW::step applies it while reading the gradients).
double clip_coefficient(double norm, double clip);

}  // namespace hytra
