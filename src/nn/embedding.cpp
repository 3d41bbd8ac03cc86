#include "nn/embedding.h"

#include "ops/ops.h"

namespace hytra {

Embedding::Embedding(const std::string& key, int64_t rows, int64_t dim, double init_std, ParamStore& store,
                     const TensorParallel& tp)
    : dim_(dim), tp_(tp) {
  w_ = &store.create(key, {tp.local(rows), dim}, InitKind::Normal, init_std, false);
  shard_param(*w_, tp, 0, {tp.local(rows)});
}

Tensor Embedding::forward(StepContext& ctx, const Tensor& ids) {
  const int64_t N = ids.numel();
  Tensor flat = ids.view({N});
  if (tp_.on()) {  // this shard's rows; -1 (a zero row) for the others' ids
    const int64_t rows = w_->value.size(0);
    Tensor mine = Tensor::empty({N}, DType::I32, ids.device());
    ops::vocab_shard_ids(ctx.ex(), mine, flat, tp_.rank * rows, rows, -1);
    flat = mine;
  }
  ctx.saved<Saved>(this).ids = flat;
  Tensor y = Tensor::empty({N, dim_}, w_->value.dtype(), w_->value.device());
  ops::embedding_fwd(ctx.ex(), y, flat, w_->value);
  Shape s = ids.shape();
  s.push_back(dim_);
  y = y.view(s);
  if (tp_.seq()) return seq_reduce_scatter(ctx.ex(), tp_, y);  // this rank's tokens of the sum
  tp_all_reduce(tp_, y);
  return y;
}

Tensor Embedding::backward(StepContext& ctx, const Tensor& dy) {
  Saved& s = ctx.saved<Saved>(this);
  const Tensor d = tp_.seq() ? seq_gather(ctx.ex(), tp_, dy) : dy;  // the whole sequence's
  ops::embedding_bwd(ctx.ex(), w_->grad, d.view({s.ids.numel(), dim_}), s.ids);
  return Tensor();
}

}  // namespace hytra
