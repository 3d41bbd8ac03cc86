#include "nn/embedding.h"

#include "ops/ops.h"

namespace hytra {

Embedding::Embedding(const std::string& key, int64_t rows, int64_t dim, double init_std, ParamStore& store)
    : dim_(dim) {
  w_ = &store.create(key, {rows, dim}, InitKind::Normal, init_std, false);
}

Tensor Embedding::forward(StepContext& ctx, const Tensor& ids) {
  const int64_t N = ids.numel();
  Tensor flat = ids.view({N});
  ctx.saved<Saved>(this).ids = flat;
  Tensor y = Tensor::empty({N, dim_}, w_->value.dtype(), w_->value.device());
  ops::embedding_fwd(ctx.ex(), y, flat, w_->value);
  Shape s = ids.shape();
  s.push_back(dim_);
  return y.view(s);
}

Tensor Embedding::backward(StepContext& ctx, const Tensor& dy) {
  Saved& s = ctx.saved<Saved>(this);
  ops::embedding_bwd(ctx.ex(), w_->grad, dy.view({s.ids.numel(), dim_}), s.ids);
  return Tensor();
}

}  // namespace hytra
