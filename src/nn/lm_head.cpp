#include "nn/lm_head.h"

#include <algorithm>

#include "nn/module.h"
#include "ops/ops.h"

namespace hytra {

OutputLayer::OutputLayer(const std::string& key, int64_t vocab, int64_t hidden, double init_std, Param* tied,
                         ParamStore& store, const TensorParallel& tp)
    : hidden_(hidden),
      tp_(tp),
      w_(tied ? tied : &store.create(key, {tp.local(vocab), hidden}, InitKind::Normal, init_std, false)) {
  if (!tied) shard_param(*w_, tp, 0, {tp.local(vocab)});
}

namespace {
// This rank's labels: the index inside its vocabulary shard [start, start + rows), -1 for ignored labels, `outside`
// for the other shards' labels.
Tensor shard_labels(Exec& ex, const Tensor& labels, int64_t start, int64_t rows, int64_t outside) {
  Tensor t = Tensor::empty(labels.shape(), DType::I32, labels.device());
  ops::vocab_shard_ids(ex, t, labels, start, rows, outside);
  return t;
}
}  // namespace

Tensor OutputLayer::forward(StepContext& ctx, const Tensor& input, const Tensor& labels, const Tensor& dloss) {
  const int64_t N = labels.numel();
  Saved& s = ctx.saved<Saved>(this);
  const Tensor h = tp_.seq() ? seq_gather(ctx.ex(), tp_, input) : input;  // every token's hidden state
  s.h = h.view({N, hidden_});
  s.labels = labels.view({N});
  Tensor loss = Tensor::empty({N}, stat_dtype(h.dtype()), h.device());
  if (tp_.on()) {
    Exec& ex = ctx.ex();
    const int64_t rows = w_->value.size(0);
    const DType sd = stat_dtype(h.dtype());
    const Tensor mine = shard_labels(ex, s.labels, tp_.rank * rows, rows, -1);
    Tensor shard_loss = Tensor::empty({N}, sd, h.device()), shard_lse = Tensor::empty({N}, sd, h.device());
    ops::lm_head_ce_fwd(ex, shard_loss, shard_lse, s.h, w_->value, mine, kVocabChunk);
    Tensor target = Tensor::empty({N}, sd, h.device()), parts = Tensor::empty({tp_.size, N}, sd, h.device());
    ops::ce_shard_target(ex, target, shard_loss, shard_lse, mine);
    tp_.comm->all_reduce_sum(target);  // the label's logit, from the rank holding it
    tp_.comm->all_gather(parts, shard_lse);
    s.dloss = s.dh = Tensor();
    s.lse = Tensor::empty({N}, sd, h.device());
    ops::ce_shard_combine(ex, loss, s.lse, parts, target, s.labels);
    return loss.view(labels.shape());
  }
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
  const int64_t rows = w_->value.size(0);
  const Tensor labels = tp_.on() ? shard_labels(ctx.ex(), s.labels, tp_.rank * rows, rows, rows) : s.labels;
  ops::lm_head_ce_bwd(ctx.ex(), dh, w_->grad, dloss.view({s.h.size(0)}), s.h, w_->value, labels, s.lse, kVocabChunk);
  if (tp_.seq()) return seq_reduce_scatter(ctx.ex(), tp_, dh.view(shape));
  tp_all_reduce(tp_, dh);
  return dh.view(shape);
}

}  // namespace hytra
