// AdamW over a model's parameters: fp32 moments m and v per parameter (one flat buffer each, laid
// out like the parameter buffer), weight decay skipped for no_decay parameters (norms, biases).
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

class AdamW {
 public:
  AdamW(ParamStore& params, const AdamWConfig& cfg);
  // One update at learning rate lr with the gradients multiplied by grad_scale (the clip
  // coefficient); step counts from 1.
  void step(Exec& ex, double lr, double grad_scale = 1.0);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }  // resuming from a checkpoint
  // Per-parameter moments, in ParamStore::all() order (views into flat fp32 buffers).
  const std::vector<Tensor>& exp_avg() const { return m_; }
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }

 private:
  ParamStore& params_;
  AdamWConfig cfg_;
  Tensor m_flat_, v_flat_;             // same layout as the parameter buffer
  struct Span {
    int64_t offset, len;  // elements of the flat buffers
    double weight_decay;
  };
  std::vector<Span> spans_;
  std::vector<Tensor> m_, v_;          // per-parameter views
  int64_t step_ = 0;
};

// Global L2 norm of all gradients: one fixed-order sum of squares over the flat gradient buffer.
double grad_global_norm(Exec& ex, ParamStore& params);
// Megatron's clip coefficient: clip / (norm + 1e-6) when clip > 0 and that is below 1, else 1
// (AdamW::step applies it while reading the gradients).
double clip_coefficient(double norm, double clip);

}  // namespace hytra
