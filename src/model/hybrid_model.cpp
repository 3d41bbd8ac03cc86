#include "model/hybrid_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "model/layer_kinds.h"
#include "model/naming.h"
#include "model/pattern.h"
#include "model/recompute_plan.h"
#include "nn/decode_cache.h"
#include "nn/hyper_connection.h"
#include "nn/moe/moe_layer.h"
#include "nn/mtp.h"
#include "nn/pre_norm.h"
#include "nn/recompute.h"
#include "ops/ops.h"

namespace hytra {

HybridModel::HybridModel(const ModelConfig& cfg, const LayerPlan& plan, const TensorParallel& tp, ParamStore* store,
                         const ExpertParallel& ep)
    : cfg_(cfg),
      tp_(tp),
      ep_(ep),
      plan_(plan),
      own_store_(store ? nullptr : std::make_unique<ParamStore>()),
      store_(store ? *store : *own_store_) {
  // The pattern decides (docs/spec/pattern.md §6). Megatron's layer count, which scales the output projections' init
  // (std / sqrt(2 x layers)), counts a `[...]` group once: a GPT stack's `[*-]` is one transformer layer.
  cfg_.num_layers = plan_.num_logical_layers;
  if (plan_.stage) {
    first_ = plan_.stage->first;
    last_ = plan_.stage->last;
  }
  const std::vector<LayerItem>& items = plan_.stage ? plan_.stage->items : plan_.items;
  const int64_t V = cfg_.padded_vocab_size(), C = cfg_.hidden_size;
  if (first_) embedding_ = std::make_unique<Embedding>(kWordEmbeddingKey, V, C, cfg_.init_method_std, store_, tp_);
  if (first_ && cfg_.position_embedding_type == PositionEmbedding::LearnedAbsolute)
    position_embedding_ =
        std::make_unique<Embedding>(kPositionEmbeddingKey, cfg_.max_positions(), C, cfg_.init_method_std, store_);
  auto count = [this](char s) { ++counts_.sublayers[s]; };
  HyperConnectionOptions hc;
  hc.hidden = C;
  hc.streams = cfg_.mhc_num_residual_streams;
  hc.sinkhorn_iterations = cfg_.mhc_sinkhorn_iterations;
  hc.init_gating = cfg_.mhc_init_gating_factor;
  hc.variant = cfg_.mhc_variant;
  for (const LayerItem& item : items) {
    for (size_t j = 0; j < item.symbols.size(); ++j) {
      SubLayerSpec spec{item.symbols[j], layer_prefix(item.logical), item.physical[j], tp_, ep_};
      param_first_.push_back(store_.all().size());
      std::unique_ptr<Module> layer = build_sublayer(cfg_, spec, store_);
      if (cfg_.enable_mhc) {  // docs/spec/README.md decision 3: one hyper-connection per physical sub-layer
        HyperConnectionOptions o = hc;
        o.tp = tp_;
        o.recompute_layer = selective_body(cfg_, spec.symbol);
        layer = std::make_unique<HyperConnection>(o, spec.prefix + layer_kind(spec.symbol).hyper_connection,
                                                  std::move(layer), store_);
      }
      sublayers_.push_back(std::move(layer));
      sublayer_names_.push_back(str(layer_prefix(item.logical).substr(0, layer_prefix(item.logical).size() - 1), " (",
                                    layer_kind(spec.symbol).name, ")"));
      count(spec.symbol);
    }
  }
  param_first_.push_back(store_.all().size());
  NormOptions norm{cfg_.normalization, C, cfg_.norm_epsilon};
  if (last_) build_head(norm);
  LayerPlan stage_plan = plan_;  // recompute counts this stage's layers (docs/spec/pattern.md §5)
  stage_plan.items = items;
  RecomputePlan r = plan_recompute(cfg_, stage_plan, sublayers_.size());
  units_ = std::move(r.units);
  residual_ = std::make_unique<ResidualStream>(cfg_, sublayers_, final_norm_.get(), std::move(r.selective_body),
                                               std::move(r.mhc_block_start));
}

void HybridModel::build_head(const NormOptions& norm) {
  const int64_t V = cfg_.padded_vocab_size(), C = cfg_.hidden_size;
  final_norm_ = std::make_unique<Norm>(norm, final_norm_prefix(plan_.main.value_or("")), store_);
  final_norm_->sequence_parallel_grads(tp_);
  // The word embedding on this stage: the first stage's, or (a later stage whose LM head is tied to it or whose
  // MTP depths read it) a copy under the same name, initialised alike and kept equal (docs/parallelism.md).
  Param* word = nullptr;
  if (first_)
    word = &embedding_->weight();
  else if (!cfg_.untie_embeddings_and_output_weights || plan_.mtp_depths > 0) {
    word = embedding_copy_ =
        &store_.create(kWordEmbeddingKey, {tp_.local(V), C}, InitKind::Normal, cfg_.init_method_std, false);
    shard_param(*word, tp_, 0, {tp_.local(V)});
  }
  Param* tied = cfg_.untie_embeddings_and_output_weights ? nullptr : word;
  output_ = std::make_unique<OutputLayer>(kOutputLayerKey, V, C, cfg_.init_method_std, tied, store_, tp_);
  for (int64_t d = 0; d < plan_.mtp_depths; ++d) {
    const std::string prefix = "mtp.layers." + std::to_string(d) + ".";
    auto build = [&](ParamStore& store) {
      std::vector<std::unique_ptr<Module>> layers;
      for (size_t j = 0; j < plan_.mtp_items.size(); ++j) {
        const LayerItem& item = plan_.mtp_items[j];
        const SubLayerSpec spec{item.symbols[0], prefix + "mtp_model_layer.layers." + std::to_string(j) + ".",
                                plan_.num_layers + d * int64_t(plan_.mtp_items.size()) + item.physical[0], tp_,
                                ep_};
        ++counts_.sublayers[spec.symbol];
        layers.push_back(build_sublayer(cfg_, spec, store));
      }
      return layers;
    };
    mtp_.push_back(
        std::make_unique<MtpDepth>(prefix, norm, cfg_.init_method_std, *word, output_->weight(), build, store_, tp_));
  }
  counts_.mtp_depths = plan_.mtp_depths;
  mtp_pending_.assign(size_t(plan_.mtp_depths), {});
}

void HybridModel::forward_mtp(StepContext& ctx, const Tensor& y, const Tensor& ids, const Tensor& labels) {
  Exec& ex = ctx.ex();
  const int64_t D = int64_t(mtp_.size());
  Saved& s = ctx.saved<Saved>(this);
  s.mtp_dloss.clear();
  s.mtp_in.clear();
  Tensor h = y, id = ids, lab = labels;
  // The EP-overlap schedule runs the depths whole in the forward's last turn and the backward's first: the LM heads'
  // gradients (computed in this forward) then reach a tied word embedding after the previous micro-batch's embedding
  // gradient, as in the plain schedule (train/combined_schedule.h).
  StepContext::NoHandover whole(ctx);
  for (int64_t k = 0; k < D; ++k) {
    // Depth k+1 reads ids and labels rolled once more (the rolled-in tail masked) and its loss
    // gradient is that of (factor / D) x its mean loss over the targets, at the micro-batch's scale.
    Tensor ids_k = Tensor::empty(ids.shape(), DType::I32, ids.device());
    Tensor labels_k = Tensor::empty(ids.shape(), DType::I32, ids.device());
    Tensor dloss = Tensor::empty(ids.shape(), stat_dtype(y.dtype()), ids.device());
    Tensor targets = Tensor::empty({1}, stat_dtype(y.dtype()), ids.device());
    ops::mtp_shift(ex, ids_k, labels_k, dloss, targets, id, lab, cfg_.mtp_loss_scaling_factor / double(D),
                   ctx.aux_loss_scale);
    Tensor h_next;
    // Full recompute (docs/spec/README.md decision 4): each depth is one unit, uniform or block alike.
    const bool checkpoint = cfg_.recompute_granularity == RecomputeGranularity::Full;
    if (checkpoint) s.mtp_in.push_back({h, ids_k, labels_k});
    Tensor losses;
    {
      DropScope keep(ctx, checkpoint);
      const NvtxRange range("MTP depth forward");
      losses = mtp_[size_t(k)]->forward(ctx, h, ids_k, labels_k, h_next);
    }
    s.mtp_dloss.push_back(dloss);
    Tensor total = Tensor::empty({1}, losses.dtype(), losses.device());
    ops::sum(ex, total, losses);
    mtp_pending_[size_t(k)].push_back({total, targets});  // read once per step (mtp_losses)
    h = h_next;
    id = ids_k;
    lab = labels_k;
  }
}

std::vector<double> HybridModel::mtp_losses() const {
  std::vector<double> out;
  for (const auto& depth : mtp_pending_) {
    double sum = 0;  // each micro-batch's mean over its targets, in micro-batch order
    for (const auto& [total, targets] : depth) {
      const double n = targets.to_f64_vector()[0];
      sum += n > 0 ? total.to_f64_vector()[0] / n : 0.0;
    }
    out.push_back(depth.empty() ? 0.0 : sum / double(depth.size()));
  }
  return out;
}

Tensor HybridModel::forward(StepContext& ctx, const Tensor& ids, const Tensor& labels, const Tensor& input) {
  Exec& ex = ctx.ex();
  HYTRA_ASSERT(first_ != input.defined(), "HybridModel::forward: a stage after the first takes the hidden state");
  ctx.params_needed(param_first_[0]);
  Tensor h;
  {
    const NvtxRange range("embedding forward");
    h = first_ ? embedding_->forward(ctx, ids) : input;  // (B,T,C)
  }
  if (position_embedding_) {
    const int64_t B = ids.size(0), T = ids.size(1);
    std::vector<float> pos(size_t(B * T));
    for (int64_t i = 0; i < B * T; ++i) pos[size_t(i)] = float(i % T);
    Tensor pos_ids = Tensor::empty({B, T}, DType::I32);
    pos_ids.copy_from(pos);
    Tensor p = position_embedding_->forward(ctx, pos_ids.to(ids.device()));
    if (tp_.seq()) p = seq_part(ex, tp_, p);  // this rank's tokens
    ops::add(ex, h, h, p);
  }
  // The one stack loop: units of sub-layers (a full-recompute unit keeps its input state and drops
  // what its layers save), the residual stream's policy (plain or mHC) joining their outputs.
  Saved& saved = ctx.saved<Saved>(this);  // (a stable reference: slots never move)
  saved.unit_in.assign(units_.size(), {});
  ResidualStream::State state = first_ ? residual_->enter(ctx, h) : residual_->resume(ctx, h);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].recompute) saved.unit_in[u] = state;
    DropScope keep(ctx, units_[u].recompute);
    for (size_t i = units_[u].begin; i < units_[u].end; ++i) {
      ctx.params_needed(param_first_[i + 1]);
      const NvtxRange range(sublayer_names_[i], " forward");
      residual_->step(ctx, i, state);
      if (ctx.check_finite) check_finite(ctx, i, state.f.defined() ? state.f : state.h, "output");
    }
  }
  if (!last_) return residual_->exit(ctx, state);
  ctx.params_needed(store_.all().size());
  return head(ctx, residual_->leave(ctx, state), ids, labels);
}

void HybridModel::check_finite(StepContext& ctx, size_t i, const Tensor& t, const char* what) const {
  if (!ctx.first_non_finite.empty()) return;
  Tensor total = Tensor::empty({1}, t.dtype(), t.device());
  ops::sum(ctx.ex(), total, t.view({t.numel()}));  // a NaN or infinity anywhere makes the sum one
  if (!std::isfinite(total.to_f64_vector()[0]))
    ctx.first_non_finite =
        str(sublayer_names_[i], ": its ", what, " in ", ctx.recomputing ? "a recompute" : "the pass");
}

Tensor HybridModel::logits(StepContext& ctx, const Tensor& ids) {
  HYTRA_CHECK(first_ && last_ && !tp_.on(), "logits: a whole model on one rank (no pipeline or tensor parallelism)");
  Exec& ex = ctx.ex();
  Tensor h = embedding_->forward(ctx, ids);
  if (position_embedding_) {  // positions from 0, or (decoding) from the cache's
    const int64_t B = ids.size(0), T = ids.size(1), p0 = ctx.decode != nullptr ? ctx.decode->position() : 0;
    HYTRA_CHECK(p0 + T <= cfg_.max_positions(), "logits: position ", p0 + T - 1, " is past the ", cfg_.max_positions(),
                " learned positions (--max-position-embeddings)");
    Tensor pos_ids = Tensor::empty({B, T}, DType::I32);
    for (int64_t i = 0; i < B * T; ++i) pos_ids.data<int32_t>()[i] = int32_t(p0 + i % T);
    ops::add(ex, h, h, position_embedding_->forward(ctx, pos_ids.to(ids.device())));
  }
  ResidualStream::State state = residual_->enter(ctx, h);
  for (size_t i = 0; i < sublayers_.size(); ++i) residual_->step(ctx, i, state);
  const Tensor y = residual_->leave(ctx, state);  // (B,T,C)
  const int64_t B = ids.size(0), T = ids.size(1), C = y.size(2);
  const Tensor& w = output_->weight().value;  // (V,C)
  Tensor out = Tensor::empty({B * T, w.size(0)}, stat_dtype(y.dtype()), y.device());
  ops::gemm(ex, out, y.view({B * T, C}), w, false, true, 1.0f, 0.0f);
  return out.view({B, T, w.size(0)});
}

// The LM loss from the final-normed hidden state y, then the MTP depths. MTP trains only: its losses
// are not part of the returned LM loss (their gradients are applied in backward and their values
// logged, docs/spec/mtp.md §2).
Tensor HybridModel::head(StepContext& ctx, const Tensor& y, const Tensor& ids, const Tensor& labels) {
  Tensor losses;
  {
    const NvtxRange range("output layer and loss forward");
    losses = output_->forward(ctx, y, labels, ctx.grad_enabled ? ctx.loss_grad : Tensor());
  }
  Saved& s = ctx.saved<Saved>(this);
  s.mtp_active = ctx.grad_enabled && !mtp_.empty();
  if (s.mtp_active) forward_mtp(ctx, y, ids, labels);
  return losses;
}

Tensor HybridModel::backward(StepContext& ctx, const Tensor& grad) {
  Saved& saved = ctx.saved<Saved>(this);
  // The gradients complete as the backward passes (with delayed weight gradients: in backward_dw, or under the
  // EP-overlap schedule in each layer's slot, right after its backward).
  const size_t n = store_.all().size();
  const bool in_slots = ctx.delay_wgrad && ctx.wgrad_in_slots, ready = !ctx.delay_wgrad || in_slots;
  Tensor d = last_ ? head_backward(ctx, grad, saved) : grad;
  if (ready) ctx.grads_ready(param_first_.back(), n);
  for (size_t u = units_.size(); u-- > 0;) {
    const RecomputePlan::Unit& unit = units_[u];
    if (unit.recompute) {  // full recompute: rebuild the unit's saved state from its input
      RerunScope rerun(ctx);
      ResidualStream::State state = saved.unit_in[u];
      for (size_t j = unit.begin; j < unit.end; ++j) {
        const NvtxRange range(sublayer_names_[j], " recompute");
        residual_->step(ctx, j, state);
      }
    }
    for (size_t i = unit.end; i-- > unit.begin;) {
      const NvtxRange range(sublayer_names_[i], " backward");
      d = residual_->step_backward(ctx, i, d);
      if (ctx.check_finite) check_finite(ctx, i, d, "input gradient");
      if (in_slots) sublayers_[i]->backward_dw(ctx);
      if (ready) ctx.grads_ready(param_first_[i], param_first_[i + 1]);
    }
  }
  if (!first_) return d;
  const Tensor dh = residual_->leave_backward(ctx, d);
  if (position_embedding_)  // (whole on every rank: under sequence parallelism, the whole sequence's gradient)
    position_embedding_->backward(ctx, tp_.seq() ? seq_gather(ctx.ex(), tp_, dh) : dh);
  {
    const NvtxRange range("embedding backward");
    embedding_->backward(ctx, dh);
  }
  if (ready) ctx.grads_ready(0, n);
  return Tensor();
}

Tensor HybridModel::head_backward(StepContext& ctx, const Tensor& dloss, Saved& saved) {
  Exec& ex = ctx.ex();
  Tensor dy;
  {
    const NvtxRange range("output layer and loss backward");
    dy = output_->backward(ctx, dloss);  // d(final norm output)
  }
  if (saved.mtp_active) {  // the depths in reverse: each returns d(its input hidden state)
    StepContext::NoHandover whole(ctx);  // (forward_mtp says why)
    Tensor dnext;
    for (int64_t k = int64_t(mtp_.size()) - 1; k >= 0; --k) {
      if (!saved.mtp_in.empty()) {  // full recompute: the depth's forward again
        const MtpInput& in = saved.mtp_in[size_t(k)];
        Tensor unused;
        RerunScope rerun(ctx);
        mtp_[size_t(k)]->forward(ctx, in.h, in.ids, in.labels, unused);
      }
      const NvtxRange range("MTP depth backward");
      dnext = mtp_[size_t(k)]->backward(ctx, saved.mtp_dloss[size_t(k)], dnext);
      if (ctx.delay_wgrad && ctx.wgrad_in_slots) mtp_[size_t(k)]->backward_dw(ctx);
    }
    ops::axpy(ex, dy, dnext, 1.0);
  }
  return residual_->enter_backward(ctx, dy);  // the final norm's backward
}

std::string HybridModel::graph_blocker() const {
  for (const MoeLayer* moe : moe_layers())
    if (std::string why = moe->graph_blocker(); !why.empty()) return why;
  if (!mtp_.empty()) return "MTP depths read their losses and build their gradients on the host";
  if (position_embedding_) return "learned absolute position ids are built on the host";
  return "";
}

std::vector<MoeLayer*> HybridModel::moe_layers() const {
  std::vector<MoeLayer*> out;
  for (const auto& l : sublayers_) {
    Module* m = l.get();
    if (auto* hc = dynamic_cast<HyperConnection*>(m)) m = &hc->layer();
    if (auto* moe = dynamic_cast<MoeLayer*>(m)) out.push_back(moe);
  }
  for (const auto& d : mtp_)
    for (const auto& l : d->layers())
      if (auto* moe = dynamic_cast<MoeLayer*>(l.get())) out.push_back(moe);
  return out;
}

std::vector<MoeStats> HybridModel::moe_stats() const {
  std::vector<MoeStats> out;
  for (const MoeLayer* moe : moe_layers()) out.push_back(moe->stats());
  return out;
}

void HybridModel::finish_step(const std::vector<MoeStats>* reduced) {
  const std::vector<MoeLayer*> layers = moe_layers();
  HYTRA_ASSERT(reduced == nullptr || reduced->size() == layers.size(), "finish_step: one MoeStats a MoE layer");
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->finish_step(reduced != nullptr ? &(*reduced)[i] : nullptr);
  mtp_pending_.assign(mtp_.size(), {});
}

void HybridModel::backward_dw(StepContext& ctx) {
  const size_t n = store_.all().size();
  for (auto it = mtp_.rbegin(); it != mtp_.rend(); ++it) (*it)->backward_dw(ctx);
  ctx.grads_ready(param_first_.back(), n);
  for (size_t i = sublayers_.size(); i-- > 0;) {
    const NvtxRange range(sublayer_names_[i], " weight gradients");
    sublayers_[i]->backward_dw(ctx);
    ctx.grads_ready(param_first_[i], param_first_[i + 1]);
  }
  ctx.run_wgrad();
  ctx.grads_ready(0, n);
}

}  // namespace hytra
