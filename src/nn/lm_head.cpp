#include "nn/lm_head.h"

#include <algorithm>

#include "nn/module.h"
#include "ops/ops.h"

namespace hytra {

OutputLayer::OutputLayer(const std::string& key, int64_t vocab, int64_t hidden, double init_std, Param* tied,
                         ParamStore& store)
    : hidden_(hidden), w_(tied ? tied : &store.create(key, {vocab, hidden}, InitKind::Normal, init_std, false)) {}

Tensor OutputLayer::forward(StepContext& ctx, const Tensor& h, const Tensor& labels, const Tensor& dloss) {
  const int64_t N = labels.numel();
  Saved& s = ctx.saved<Saved>(this);
  s.h = h.view({N, hidden_});
  s.labels = labels.view({N});
  Tensor loss = Tensor::empty({N}, stat_dtype(h.dtype()), h.device());
  if (dloss.defined()) {
    const int64_t V = w_->value.size(0);
    const int64_t chunks = std::max<int64_t>(1, (N * V + kLogitsElements - 1) / kLogitsElements);
    s.dloss = dloss.view({N});
    s.dh = Tensor::empty(s.h.shape(), s.h.dtype(), s.h.device());
    ops::lm_head_ce_fwd_bwd(ctx.ex(), loss, s.dh, w_->grad, s.h, w_->value, s.labels, s.dloss, (N + chunks - 1) / chunks);
  } else {
    s.dloss = s.dh = Tensor();
    s.lse = Tensor::empty({N}, stat_dtype(h.dtype()), h.device());
    ops::lm_head_ce_fwd(ctx.ex(), loss, s.lse, s.h, w_->value, s.labels, kVocabChunk);
  }
  return loss.view(labels.shape());
}

Tensor OutputLayer::backward(StepContext& ctx, const Tensor& dloss) {
  Saved& s = ctx.saved<Saved>(this);
  Shape shape = dloss.shape();
  shape.push_back(hidden_);
  if (s.dh.defined()) {
    HYTRA_ASSERT(dloss.raw() == s.dloss.raw() && dloss.numel() == s.dloss.numel(),
                 "OutputLayer::backward: dloss differs from the one its forward computed the gradients for");
    return s.dh.view(shape);
  }
  Tensor dh = Tensor::empty(s.h.shape(), s.h.dtype(), s.h.device());
  ops::lm_head_ce_bwd(ctx.ex(), dh, w_->grad, dloss.view({s.h.size(0)}), s.h, w_->value, s.labels, s.lse,
                      kVocabChunk);
  return dh.view(shape);
}

}  // namespace hytra
