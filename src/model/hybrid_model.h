// HybridModel: embedding -> the plan's sub-layers (each h = h + f(h)) -> final norm -> output layer
// with vocabulary cross-entropy. The LayerPlan (model/pattern.h) decides which sub-layers exist and
// their canonical keys; nothing here special-cases an architecture.
// Residual stream convention: sub-layer modules compute f(h) only; this class owns the residual
// adds, so in backward dh flows straight through and each sub-layer adds its input gradient.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/flops.h"
#include "model/layer_plan.h"
#include "model/model_plan.h"
#include "model/recompute_plan.h"
#include "model/residual_stream.h"
#include "nn/context.h"
#include "nn/embedding.h"
#include "nn/lm_head.h"
#include "nn/module.h"
#include "nn/moe/router.h"
#include "nn/mtp.h"
#include "nn/norm.h"
#include "nn/param.h"

namespace hytra {

class MoeLayer;

class HybridModel {
 public:
  // Builds the modules and registers their parameters; call params().finalize(...) and init next. `tp`: the
  // tensor-parallel group the weights are split over (docs/parallelism.md "Tensor parallelism"; a one-rank one:
  // the whole model, e.g. to know the canonical shapes). `store`: the parameter store of an interleaved pipeline
  // rank's model chunks, shared by them in chunk order (null: the model's own). `ep`: the expert-parallel group the
  // routed experts are divided among.
  HybridModel(const ModelConfig& cfg, const LayerPlan& plan, const TensorParallel& tp = {},
              ParamStore* store = nullptr, const ExpertParallel& ep = {});
  HybridModel(const HybridModel&) = delete;  // residual_ refers to members
  HybridModel& operator=(const HybridModel&) = delete;

  ParamStore& params() { return store_; }
  // The shape of what passes between pipeline stages for micro-batches of B x T tokens: the hidden state
  // (B,T,C), or with mHC the n streams (B,T,n,C).
  // Under sequence parallelism: this rank's T / tp tokens.
  Shape stage_boundary_shape(int64_t B, int64_t T) const {
    const int64_t t = tp_.seq() ? T / tp_.size : T;
    return cfg_.enable_mhc ? Shape{B, t, cfg_.mhc_num_residual_streams, cfg_.hidden_size}
                           : Shape{B, t, cfg_.hidden_size};
  }
  const LayerPlan& plan() const { return plan_; }
  LayerCounts layer_counts() const { return counts_; }

  // Per-token losses (B,T) (fp32, fp64 for fp64 params) for token ids (B,T) and labels (B,T)
  // (int32, on the params' device; label < 0 = not a target, loss 0).
  // A pipeline stage (docs/parallelism.md): one after the first starts from `input`, what the stage before sent
  // (stage_boundary_shape: the hidden state, or the mHC streams); one before the last returns that for the next
  // stage instead of losses.
  Tensor forward(StepContext& ctx, const Tensor& ids, const Tensor& labels, const Tensor& input = Tensor());
  // The LM head's logits (B,T,padded vocabulary), fp32 (fp64 for fp64 params), of a whole model (one stage, no tensor
  // parallelism; MTP depths unused): for comparisons with other implementations (hytra eval-step), and with ctx.decode
  // set the next token's logits (B,1,padded vocabulary) for ids (B,1) at the cache's position (hytra generate).
  Tensor logits(StepContext& ctx, const Tensor& ids);
  // Backpropagates `grad`, accumulating parameter gradients: dloss (B,T) on the last stage, else the gradient
  // of the hidden state forward() returned. Returns the gradient of `input` (a stage after the first).
  Tensor backward(StepContext& ctx, const Tensor& grad);
  // The pipeline stage holds the embeddings (first) / the final norm, LM head and MTP depths (last).
  bool first_stage() const { return first_; }
  bool last_stage() const { return last_; }
  // A later stage's copy of the word embedding (tied LM head or MTP depths; else null): its gradient is summed
  // with the first stage's and it counts once in the gradient norm.
  Param* embedding_copy() const { return embedding_copy_; }
  // Runs the weight-gradient work backward() queued under ctx.delay_wgrad, layer by layer from the
  // last (docs/spec/moe.md §7), then anything still queued (the output layer and embeddings never queue).
  void backward_dw(StepContext& ctx);

  // The MoE layers' routing statistics over this step's micro-batches (aux/z losses, tokens per
  // expert), in layer order; then finish_step() once per global batch (expert-bias updates).
  std::vector<MoeStats> moe_stats() const;
  // Each MTP depth's loss (mean over target tokens) averaged over this step's training micro-batches.
  std::vector<double> mtp_losses() const;
  // `reduced`: moe_stats() summed over the data-parallel ranks (nullptr: this process's own).
  void finish_step(const std::vector<MoeStats>* reduced = nullptr);

  // Why a training micro-batch's forward + backward cannot be replayed as a captured CUDA graph
  // (host work that must run every time), or "" when it can.
  std::string graph_blocker() const;

 private:
  ModelConfig cfg_;
  TensorParallel tp_;
  ExpertParallel ep_;
  LayerPlan plan_;
  bool first_ = true, last_ = true;
  Param* embedding_copy_ = nullptr;
  LayerCounts counts_;
  std::unique_ptr<ParamStore> own_store_;  // unless the model is a chunk of a rank's shared store
  ParamStore& store_;
  std::unique_ptr<Embedding> embedding_;
  std::unique_ptr<Embedding> position_embedding_;   // learned_absolute only
  std::vector<std::unique_ptr<Module>> sublayers_;  // physical order
  // The first parameter (ParamStore::all()) of each sub-layer, then that of the final norm: sub-layer i owns
  // [param_first_[i], param_first_[i + 1]); the embeddings come before, the head and MTP depths after.
  std::vector<size_t> param_first_;
  std::vector<std::string> sublayer_names_;  // "decoder.layers.3 (MLP)", for the non-finite diagnosis
  // With ctx.check_finite: notes sub-layer i in ctx when `t` (its output, or its input's gradient) is not finite.
  void check_finite(StepContext& ctx, size_t i, const Tensor& t, const char* what) const;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<OutputLayer> output_;
  std::vector<std::unique_ptr<MtpDepth>> mtp_;  // docs/spec/mtp.md: one per depth
  // Per depth, per training micro-batch of this step: (sum of its losses (1), its targets (1)), on
  // the device until mtp_losses() reads them.
  std::vector<std::vector<std::pair<Tensor, Tensor>>> mtp_pending_;
  struct MtpInput {
    Tensor h, ids, labels;  // (B,T,C), (B,T), (B,T)
  };
  struct Saved {
    std::vector<ResidualStream::State> unit_in;  // full recompute: each recomputed unit's input state
    bool mtp_active = false;
    std::vector<MtpInput> mtp_in;   // full recompute: each MTP depth's inputs
    std::vector<Tensor> mtp_dloss;  // per MTP depth (B,T): the scaled loss gradient, fixed in forward
  };
  void forward_mtp(StepContext& ctx, const Tensor& y, const Tensor& ids, const Tensor& labels);
  void build_head(const NormOptions& norm);  // the last stage's final norm, LM head and MTP depths
  // Through the LM head and the MTP depths to d(the last sum of the stream).
  Tensor head_backward(StepContext& ctx, const Tensor& dloss, Saved& saved);
  std::vector<MoeLayer*> moe_layers() const;  // main stack, then MTP depths
  Tensor head(StepContext& ctx, const Tensor& y, const Tensor& ids, const Tensor& labels);
  std::vector<RecomputePlan::Unit> units_;  // a partition of the sub-layers, in order (model/recompute_plan.h)
  std::unique_ptr<ResidualStream> residual_;
};

}  // namespace hytra
