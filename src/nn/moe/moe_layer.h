// MoE layer (`E`, docs/spec/moe.md): f(x) = unpermute(experts(permute(norm(x)), probs)) + shared(norm(x))
// with the norm `<prefix>pre_mlp_layernorm.weight` (a separate norm in MoE layers, docs/spec/names.md §1), the
// TopKRouter, the one-rank token dispatcher (token_dispatcher.h: the seam for expert parallelism),
// GroupedExperts under `<prefix>mlp.experts.`, and optional shared experts
// (`<prefix>mlp.shared_experts.linear_fc1/fc2.weight`) whose output is scaled, with
// --moe-shared-expert-gate, by sigmoid(x . gate_weight) (`mlp.shared_experts.gate_weight` [1, C]):
// the gate is a one-expert sigmoid router and the scale its probability, applied like a routing
// probability (after the activation, before fc2 — the same product when there are no biases).
// Shared experts have no clamp or GLU interleave (Megatron's separate shared-expert knobs).
#pragma once
#include <memory>
#include <string>

#include "nn/moe/expert_dispatch.h"
#include "nn/moe/experts.h"
#include "nn/moe/router.h"
#include "nn/moe/token_dispatcher.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"

namespace hytra {

struct MoeOptions {
  int64_t hidden = 0;
  RouterOptions router;
  DispatchOptions dispatch;
  ExpertsOptions experts;
  int64_t shared_ffn = 0;  // --moe-shared-expert-intermediate-size (0: none)
  bool shared_gate = false;
  ops::ExpertActivation shared_activation = ops::ExpertActivation::SwiGLU;
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-5;
  bool recompute_shared = false;  // selective recompute "shared_experts": rerun them in backward
  bool recompute_norm = false;    // selective recompute "layernorm": pre_mlp_layernorm's output rebuilt
};

class MoeLayer : public PreNormModule {
 public:
  MoeLayer(const MoeOptions& opt, const std::string& prefix, int64_t layer_number, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override;  // y = norm(x) (B,T,C) -> (B,T,C)
  Tensor backward_body(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

  const MoeStats& stats() const { return router_->stats(); }
  // Why a micro-batch of this layer needs the host (no CUDA graph), or "" when it runs on the device alone.
  std::string graph_blocker() const;
  // End of a global batch: the expert-bias update and a fresh set of counters.
  // `reduced`: the step's statistics summed over the data-parallel ranks (nullptr: this process's).
  void finish_step(const MoeStats* reduced = nullptr);

 private:
  struct Saved {
    DispatchPlan plan;
    ExpertExchange exchange;        // expert parallelism: the rows' trip to the experts' ranks
    int64_t tokens = 0;             // N
    Tensor shared_in, shared_gate;  // (N,C), (N): the shared experts' inputs (recompute_shared)
    bool shared_rerun = false;      // recompute_shared: the shared experts run again in backward
    bool norm_dropped = false;      // recompute_norm: the norm output's holders let it go
  };
  // The experts' backward is queued: the hand-over point, then (EP-overlap) their delayed weight gradients.
  void experts_backward_dw(StepContext& ctx);
  MoeOptions opt_;
  DroplessOffsets dropless_offsets_;  // the dropless plans' CSR offsets, kept across micro-batches
  CountsExchange counts_;             // expert parallelism: the token counts' trip to the host
  ExpertExchange uniform_;            // ... or, padded to capacity, the exchange the sizes give (built once)
  std::unique_ptr<Norm> norm_;
  std::unique_ptr<TopKRouter> router_;
  std::unique_ptr<GroupedExperts> experts_;
  std::unique_ptr<GroupedExperts> shared_;
  std::unique_ptr<TopKRouter> gate_;
};

}  // namespace hytra
