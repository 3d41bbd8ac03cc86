#include "nn/linear.h"

#include "ops/ops.h"

namespace hytra {

Tensor ones_column(Exec& ex, int64_t n, DType t, Device device) {
  Tensor o = Tensor::empty({n, 1}, t, device);
  ops::fill(ex, o, 1.0);
  return o;
}

Tensor zeros_on(Exec& ex, const Shape& shape, DType t, Device device) {
  Tensor z = Tensor::empty(shape, t, device);
  ops::fill(ex, z, 0.0);
  return z;
}

Linear::Linear(const std::string& prefix, int64_t in, int64_t out, bool bias, double init_std, ParamStore& store,
               const LinearSplit& split)
    : in_(in), out_(out), split_(split) {
  w_ = &store.create(prefix + "weight", {out, in}, InitKind::Normal, init_std, false);
  w_->grad_by_overwrite = true;  // backward's GEMMs take beta from grad_beta()
  if (bias) {
    b_ = &store.create(prefix + "bias", {out}, InitKind::Zeros, 0.0, true);
    b_->grad_by_overwrite = true;
  }
  const std::vector<int64_t> parts = split.parts.empty() ? std::vector<int64_t>{out} : split.parts;
  if (split.kind == LinearSplit::Column) {
    shard_param(*w_, split.tp, 0, parts);
    if (b_) shard_param(*b_, split.tp, 0, parts);
  } else if (split.kind == LinearSplit::Row) {
    shard_param(*w_, split.tp, 1, {in});
  }
}

Tensor Linear::forward(StepContext& ctx, const Tensor& input) {
  Exec& ex = ctx.ex();
  const TensorParallel& tp = split_.tp;
  // Sequence parallelism: a column-parallel projection reads the whole sequence.
  const Tensor x = split_.kind == LinearSplit::Column && tp.seq() ? seq_gather(ex, tp, input) : input;
  const int64_t N = x.numel() / in_;
  Tensor x2 = x.view({N, in_});
  Tensor y = Tensor::empty({N, out_}, x.dtype(), x.device());  // (N, out)
  ops::gemm(ex, y, x2, w_->value, false, true, 1.0f, 0.0f);
  Shape out_shape = x.shape();
  out_shape.back() = out_;
  y = y.view(out_shape);
  if (split_.kind == LinearSplit::Row) {  // the ranks' partial sums: whole, or this rank's part of the sequence
    if (tp.seq())
      y = seq_reduce_scatter(ex, tp, y);
    else
      tp_all_reduce(tp, y);
  }
  if (b_) {
    const int64_t rows = y.numel() / out_;
    Tensor y2 = y.view({rows, out_});
    ops::gemm(ex, y2, ones_column(ex, rows, x.dtype(), x.device()), b_->value.view({1, out_}), false, false, 1, 1);
  }
  // Sequence parallelism keeps this rank's tokens alone (as Megatron): the backward gathers them again.
  ctx.saved<Saved>(this).x = x.raw() == input.raw() ? x2 : input;
  return y;
}

Tensor Linear::backward(StepContext& ctx, const Tensor& grad) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const TensorParallel& tp = split_.tp;
  // Sequence parallelism: a row-parallel projection's output gradient for the whole sequence.
  const Tensor dy = split_.kind == LinearSplit::Row && tp.seq() ? seq_gather(ex, tp, grad) : grad;
  const int64_t N = dy.numel() / out_;
  Tensor dy2 = dy.view({N, out_});
  Tensor dx = Tensor::empty({N, in_}, dy.dtype(), dy.device());  // (N, in)
  ops::gemm(ex, dx, dy2, w_->value, false, false, 1.0f, 0.0f);
  Tensor x = s.x.dim() == 2 ? s.x : seq_gather(ex, tp, s.x).view({N, in_});
  Param* w = w_;
  Param* b = b_;
  auto wgrad = [&ex, dy2, x, w, b, N]() {
    ops::gemm(ex, w->grad, dy2, x, true, false, 1, w->grad_beta());  // dW (out,in) += dy^T x
    if (b) {
      Tensor db = b->grad.view({b->grad.numel(), 1});
      ops::gemm(ex, db, dy2, ones_column(ex, N, dy2.dtype(), dy2.device()), true, false, 1, b->grad_beta());  // db += dy^T 1
    }
  };
  if (ctx.delay_wgrad)
    ctx.push_wgrad(this, wgrad);
  else
    wgrad();
  Shape in_shape = dy.shape();
  in_shape.back() = in_;
  dx = dx.view(in_shape);
  if (split_.kind == LinearSplit::Column) {  // the input was whole (or gathered) on every rank
    if (tp.seq())
      dx = seq_reduce_scatter(ex, tp, dx);
    else
      tp_all_reduce(tp, dx);
  }
  return dx;
}

}  // namespace hytra
