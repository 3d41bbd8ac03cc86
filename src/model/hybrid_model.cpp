#include "model/hybrid_model.h"

#include "core/error.h"
#include "model/builder.h"
#include "model/naming.h"
#include "model/pattern.h"
#include "nn/moe/moe_layer.h"
#include "nn/pre_norm.h"
#include "ops/ops.h"

namespace hytra {

LayerPlan plan_for(const ModelConfig& cfg) {
  PlanOptions o;
  if (!cfg.hybrid_layer_pattern.empty()) {
    o.pattern = cfg.hybrid_layer_pattern;
  } else if (cfg.hybrid_attention_ratio == 0.0 && cfg.hybrid_mlp_ratio == 0.0) {
    // No pattern and no ratios: a GPT stack, one `[*-]` transformer layer per --num-layers.
    HYTRA_CHECK(cfg.num_layers > 0,
                "--hybrid-layer-pattern: give a pattern, the hybrid ratios, or --num-layers for a GPT stack");
    std::string p;
    for (int64_t i = 0; i < cfg.num_layers; ++i) p += "[*-]";
    o.pattern = p;
  }
  if (cfg.num_layers > 0) o.num_layers = cfg.num_layers;
  if (cfg.mtp_num_layers > 0) o.mtp_num_layers = cfg.mtp_num_layers;
  o.hybrid_attention_ratio = cfg.hybrid_attention_ratio;
  o.hybrid_mlp_ratio = cfg.hybrid_mlp_ratio;
  LayerPlan plan = build_layer_plan(o);
  HYTRA_CHECK(plan.mtp_depths == 0, "--mtp-num-layers: multi-token prediction is not built yet in hytra");
  HYTRA_CHECK(plan.num_layers > 0, "--hybrid-layer-pattern: the main pattern has no layers");
  return plan;
}

HybridModel::HybridModel(const ModelConfig& cfg, const LayerPlan& plan) : cfg_(cfg), plan_(plan) {
  cfg_.num_layers = plan_.num_layers;  // the pattern decides (SPEC A1.6)
  const int64_t V = cfg_.padded_vocab_size(), C = cfg_.hidden_size;
  embedding_ = std::make_unique<Embedding>(kWordEmbeddingKey, V, C, cfg_.init_method_std, store_);
  if (cfg_.position_embedding_type == "learned_absolute")
    position_embedding_ =
        std::make_unique<Embedding>(kPositionEmbeddingKey, cfg_.max_positions(), C, cfg_.init_method_std, store_);
  for (const LayerItem& item : plan_.items) {
    for (size_t j = 0; j < item.symbols.size(); ++j) {
      SubLayerSpec spec{item.symbols[j], layer_prefix(item.logical), item.physical[j]};
      sublayers_.push_back(build_sublayer(cfg_, spec, store_));
      counts_.attention += spec.symbol == '*';
      counts_.mlp += spec.symbol == '-';
      counts_.mamba += spec.symbol == 'M';
      counts_.gdn += spec.symbol == 'G';
      counts_.moe += spec.symbol == 'E';
    }
  }
  NormOptions norm{cfg_.normalization == "RMSNorm" ? NormKind::RMSNorm : NormKind::LayerNorm, C, cfg_.norm_epsilon};
  final_norm_ = std::make_unique<Norm>(norm, final_norm_prefix(plan_.main.value_or("")), store_);
  Param* tied = cfg_.untie_embeddings_and_output_weights ? nullptr : &embedding_->weight();
  output_ = std::make_unique<OutputLayer>(kOutputLayerKey, V, C, cfg_.init_method_std, tied, store_);
}

Tensor HybridModel::forward(StepContext& ctx, const Tensor& ids, const Tensor& labels) {
  Exec& ex = ctx.ex();
  Tensor h = embedding_->forward(ctx, ids);  // (B,T,C)
  if (position_embedding_) {
    const int64_t B = ids.size(0), T = ids.size(1);
    std::vector<float> pos(size_t(B * T));
    for (int64_t i = 0; i < B * T; ++i) pos[size_t(i)] = float(i % T);
    Tensor pos_ids = Tensor::empty({B, T}, DType::I32);
    pos_ids.copy_from(pos);
    Tensor p = position_embedding_->forward(ctx, pos_ids.to(ids.device()));
    ops::add(ex, h, h, p);
  }
  // Each residual add h + f is fused with the next input norm where that norm is the next
  // sub-layer's own (PreNormModule) or the final norm.
  Tensor f;  // the previous sub-layer's output, not yet added to h
  for (auto& layer : sublayers_) {
    auto* pre = dynamic_cast<PreNormModule*>(layer.get());
    if (!f.defined()) {
      f = layer->forward(ctx, h);
    } else if (pre) {
      Tensor sum;
      Tensor y = pre->input_norm().forward_add(ctx, h, f, sum);
      h = sum;
      f = pre->forward_body(ctx, y);
    } else {
      Tensor next = Tensor::empty(h.shape(), h.dtype(), h.device());
      ops::add(ex, next, h, f);
      h = next;
      f = layer->forward(ctx, h);
    }
  }
  Tensor sum;
  Tensor y = final_norm_->forward_add(ctx, h, f, sum);
  return output_->forward(ctx, y, labels);
}

void HybridModel::backward(StepContext& ctx, const Tensor& dloss) {
  Exec& ex = ctx.ex();
  Tensor dh = final_norm_->backward(ctx, output_->backward(ctx, dloss));  // d(the last sum)
  // h_next = h + f(h): dh = dh_next + df/dh, the add fused into the input norm's backward.
  for (auto it = sublayers_.rbegin(); it != sublayers_.rend(); ++it) {
    if (auto* pre = dynamic_cast<PreNormModule*>(it->get())) {
      dh = pre->input_norm().backward_add(ctx, pre->backward_body(ctx, dh), dh);
    } else {
      Tensor dx = (*it)->backward(ctx, dh);
      ops::axpy(ex, dh, dx, 1.0);
    }
  }
  if (position_embedding_) position_embedding_->backward(ctx, dh);
  embedding_->backward(ctx, dh);
}

std::vector<MoeStats> HybridModel::moe_stats() const {
  std::vector<MoeStats> out;
  for (const auto& l : sublayers_)
    if (const auto* moe = dynamic_cast<const MoeLayer*>(l.get())) out.push_back(moe->stats());
  return out;
}

void HybridModel::finish_step() {
  for (auto& l : sublayers_)
    if (auto* moe = dynamic_cast<MoeLayer*>(l.get())) moe->finish_step();
}

void HybridModel::backward_dw(StepContext& ctx) {
  for (auto it = sublayers_.rbegin(); it != sublayers_.rend(); ++it) (*it)->backward_dw(ctx);
  ctx.run_wgrad();
}

}  // namespace hytra
