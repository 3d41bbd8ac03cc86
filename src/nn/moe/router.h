// TopKRouter (docs/spec/moe.md §1-§2): logits = x W^T in fp32, top-k routing (ops::moe_router_fwd), the
// load-balancing and z losses, and the aux-loss-free expert bias.
// Keys: `<prefix>mlp.router.weight` [E, C] (N(0, std)), `<prefix>mlp.router.bias` [E] (zeros; with
// add_bias_linear, fp32 master like Megatron's fp32 router bias), `<prefix>mlp.router.expert_bias` [E]
// (with --moe-router-enable-expert-bias; a buffer: it gets no gradient, AdamW leaves it as it is,
// and the router reads its fp32 master, so it stays fp32 in bf16 runs as in Megatron).
// With --moe-router-dtype fp32 the logits, their gradient GEMMs and the probabilities are fp32;
// without it the logits and probabilities are rounded to the activation dtype (as Megatron computes
// them in that dtype) while the routing maths itself runs in fp32. The auxiliary losses are not part of the LM loss:
// their gradients (scaled by ctx.aux_loss_scale, the main loss's 1/micro-batches) are added to dlogits in backward, and
// their values are kept for logging (MoeStats).
#pragma once
#include <string>
#include <vector>

#include "nn/context.h"
#include "nn/param.h"
#include "ops/ops.h"

namespace hytra {

// --moe-router-load-balancing-type (docs/spec/moe.md §2): the loss over the micro-batch, over each
// sequence, or over the running global counts; or none.
enum class LoadBalancing { AuxLoss, SeqAuxLoss, GlobalAuxLoss, None };

struct RouterOptions {
  int64_t hidden = 0, num_experts = 0, topk = 0;  // C, E, k (set from the config)
  ops::RouterScore score = ops::RouterScore::Softmax;
  bool pre_softmax = false;
  int64_t num_groups = 0, group_topk = 0;  // group-limited routing (0 = off)
  double scaling = 1.0;                    // --moe-router-topk-scaling-factor
  bool fp32_logits = false;                // --moe-router-dtype fp32
  bool bias = false;                       // add_bias_linear: `mlp.router.bias` [E] (zeros)
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  LoadBalancing balancing = LoadBalancing::AuxLoss;  // --moe-router-load-balancing-type
  double aux_coeff = 0.0, z_coeff = 0.0;
  double init_std = 0.02;
  std::string weight_key = "mlp.router.weight";  // after the layer prefix (shared-expert gate: its own)
};

// One MoE layer's routing statistics over the micro-batches of the current step.
struct MoeStats {
  int64_t layer_number = 0;
  double aux_loss = 0, z_loss = 0;  // summed over micro-batches
  int64_t micro_batches = 0;
  std::vector<int64_t> tokens_per_expert;  // routed tokens (after dropping, before padding)
};

class TopKRouter {
 public:
  TopKRouter(const RouterOptions& opt, const std::string& prefix, ParamStore& store);

  struct Routing {
    Tensor probs;  // (N,K) fp32 (fp64 in fp64 runs)
    Tensor top;    // (N,K) int32 expert ids
  };
  // x (B,T,C) viewed (N,C); num_seqs = B (seq_aux_loss).
  Routing forward(StepContext& ctx, const Tensor& x, int64_t num_seqs);
  // dx (N,C) in x's dtype += the input gradient from dprobs (N,K) (plus the auxiliary losses' gradients),
  // added by the dx GEMM itself (beta 1); accumulates dW.
  void backward_add(StepContext& ctx, const Tensor& dprobs, Tensor& dx);

  // Selective "layernorm" recompute: drop the saved input after forward, give it back before backward.
  void forget_input(StepContext& ctx) { ctx.saved<Saved>(this).x = Tensor(); }
  void restore_input(StepContext& ctx, const Tensor& x) { ctx.saved<Saved>(this).x = x; }
  // The step's routed-token counter on the device ((E) int32) that the dispatch plan adds to (training passes:
  // the expert bias and the stats).
  Tensor& token_counter(Device device);
  // Once per global batch, after the micro-batches: bias += rate * sign(mean count - count) when
  // the expert bias is on; then the step's counters restart. `counts`: the step's routed tokens of every
  // rank that saw this step's tokens (data parallelism); nullptr: this process's own.
  void finish_step(const std::vector<int64_t>* counts = nullptr);
  // The step's statistics. Micro-batches add their losses, token counts and their own number into device
  // accumulators (so a CUDA graph replay counts like an eager run); each call reads them back and zeroes them
  // (a wait, at the step's end rather than in every layer's forward).
  const MoeStats& stats() const;
  void set_layer_number(int64_t n) { stats_.layer_number = n; }

 private:
  struct Saved {
    Tensor x;       // (N,C)
    Tensor logits;  // (N,E) fp32
    Tensor top;     // (N,K)
    Tensor daux;    // (N,E) fp32: the auxiliary losses' gradient (undefined when none)
  };
  RouterOptions opt_;
  Param* w_;
  Param* linear_bias_ = nullptr;  // mlp.router.bias
  Param* bias_ = nullptr;         // mlp.router.expert_bias
  // This step's device accumulators, allocated at the first training micro-batch: routed tokens (E) int32;
  // aux loss, z-loss and micro-batches (1) in the statistics dtype; `one` (1) = 1.
  struct Accumulators {
    Tensor tokens, aux, z, micro, one;
  };
  void ensure_accumulators(Device device, DType sd);
  void fold() const;  // adds the accumulators into stats_ and zeroes them
  mutable MoeStats stats_;
  mutable Accumulators acc_;
  std::vector<double> global_counts_;  // global_aux_loss: counts summed over this step's micro-batches
  int64_t global_micro_ = 0;           // global_aux_loss: this step's micro-batches so far
};

}  // namespace hytra
