// GroupedExperts (docs/spec/moe.md §5): for each expert e, on its contiguous block of dispatched rows,
//   y_e = fc2_e( act(fc1_e(x_e)) * p ) (+ p * b2_e)
// with p the row's routing probability, applied after the activation and before fc2. The experts' rows are
// given by row offsets on the device, and every GEMM is one grouped GEMM over all experts
// (ops::grouped_gemm*, no host synchronisation): fc1 with a GLU activation fused into it (without fc1
// biases), fc2, both data gradients and the weight gradients. The activation reads the GLU interleave
// layout of docs/spec/names.md §7 natively. Without offsets (the shared experts: one expert) the same
// maths runs as plain GEMMs. Weights, by layout (docs/spec/names.md §6, docs/spec/README.md decision 2),
// under `<prefix>` = "...mlp.experts.":
//   Indexed: linear_fc1.weight0..weight{E-1} [F1, C], linear_fc2.weight<e> [C, F] (biases bias<e>)
//   Grouped: linear_fc1.weight [E, F1, C], linear_fc2.weight [E, C, F] (biases [E, out])
//   Single (E = 1; shared experts, prefix "...mlp.shared_experts."): linear_fc1.weight [F1, C] ...
// Both multi-expert layouts feed the grouped GEMMs as one (E, out, in) tensor without copies: the indexed
// parameters are created one after the other, so they are consecutive in the parameter buffers.
// F1 = 2F for GLU activations. Indexed and grouped tensors draw identical initial values
// (Param::init_groups). fc1 ~ N(0, std), fc2 ~ N(0, std / sqrt(2 L)) as Megatron.
// Weight gradients accumulate at once or, under ctx.delay_wgrad, as queued tasks run by
// backward_dw() (fc2 then fc1, docs/spec/moe.md §7): the same GEMMs, identical gradients.
// Tensor parallelism (nn/tensor_parallel.h): each rank holds its channels of every expert's FFN (fc1's rows of each
// GLU half, or whole interleave blocks; fc2's columns), so y and dprobs are this rank's parts of sums over the ranks
// (the MoE layer sums them); fc2's biases are whole, their term added on the first rank alone.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "nn/context.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"
#include "ops/ops.h"

namespace hytra {

enum class ExpertLayout { Indexed, Grouped, Single };

struct ExpertsOptions {
  int64_t hidden = 0, ffn = 0, num_experts = 1;  // C, F, E
  ops::ExpertActivation activation = ops::ExpertActivation::SwiGLU;
  int64_t glu_interleave = 0;
  double linear_offset = 0.0, clamp = 0.0;
  bool bias = false;
  ExpertLayout weight_layout = ExpertLayout::Indexed, bias_layout = ExpertLayout::Indexed;
  double init_std = 0.02, output_init_std = 0.02;
  bool recompute_act = false;  // selective recompute "moe_act": act(h) * p rebuilt in backward
  TensorParallel tp;           // the experts' tensor-parallel group (--expert-tensor-parallel-size)
  ExpertParallel ep;           // the expert-parallel group: num_experts is the whole count, this rank holds its share
};

class GroupedExperts {
 public:
  GroupedExperts(const ExpertsOptions& opt, const std::string& prefix, ParamStore& store);

  // x (R,C) rows in expert order, probs (R) fp32 (fp64 in fp64 runs), offsets (E+1) int32 on x's device
  // (expert e's rows [offsets[e], offsets[e+1])), or undefined for one expert holding every row -> y (R,C).
  // With `add_to` (one expert only) y is added to it by fc2's GEMM instead (beta 1), and it is returned.
  Tensor forward(StepContext& ctx, const Tensor& x, const Tensor& probs, const Tensor& offsets,
                 Tensor* add_to = nullptr);
  // dy (R,C) -> dx (R,C); dprobs (R) = dL/dprobs. With `add_to` (one expert only) dx is added to it by fc1's
  // data-gradient GEMM (beta 1), and it is returned.
  Tensor backward(StepContext& ctx, const Tensor& dy, Tensor& dprobs, Tensor* add_to = nullptr);
  void backward_dw(StepContext& ctx) { ctx.run_wgrad(this); }
  // Selective "layernorm" recompute of the shared experts' input (see TopKRouter).
  void forget_input(StepContext& ctx) { ctx.saved<Saved>(this).x = Tensor(); }
  void restore_input(StepContext& ctx, const Tensor& x) { ctx.saved<Saved>(this).x = x; }

 private:
  bool glu() const;
  int64_t fc1_out() const { return glu() ? 2 * opt_.ffn : opt_.ffn; }
  // All experts' weights (E, out, in) or their gradients, and biases (E, out, 1) or their gradients.
  struct Proj {
    std::vector<Param*> w, b;  // one Param per expert (Indexed) or one for all
    Tensor weights(bool grad) const;
    Tensor biases(bool grad) const;
  };
  struct Saved {
    Tensor x;      // (R,C)
    Tensor h;      // (R,F1) fc1 output
    Tensor a;      // (R,F) act(h) * p
    Tensor probs;  // (R)
    Tensor p;      // (R,1) probs in x's dtype (fc2 bias term)
    Tensor offsets;
  };
  ExpertsOptions opt_;
  bool fc2_bias_here_ = false;  // this rank adds fc2's bias term (tensor parallelism: the first rank alone)
  Proj fc1_, fc2_;
};

}  // namespace hytra
