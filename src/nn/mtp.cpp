#include "nn/mtp.h"

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

MtpDepth::MtpDepth(const std::string& prefix, const NormOptions& norm, double init_std, Param& embedding, Param& output,
                   const LayerFactory& build_layers, ParamStore& store, const TensorParallel& tp)
    : hidden_(norm.dim) {
  const int64_t C = norm.dim;
  embedding_ = std::make_unique<Embedding>(embedding, tp);
  enorm_ = std::make_unique<Norm>(norm, prefix + "enorm.", store);
  hnorm_ = std::make_unique<Norm>(norm, prefix + "hnorm.", store);
  eh_proj_ = std::make_unique<Linear>(prefix + "eh_proj.", 2 * C, C, false, init_std, store);
  layers_ = build_layers(store);
  final_norm_ = std::make_unique<Norm>(norm, prefix + "final_layernorm.", store);
  // Under sequence parallelism the norms and eh_proj (whole on every rank) see this rank's tokens alone.
  for (Norm* n : {enorm_.get(), hnorm_.get(), final_norm_.get()}) n->sequence_parallel_grads(tp);
  sequence_parallel_grad(eh_proj_->weight(), tp);
  output_ = std::make_unique<OutputLayer>("", output.shape.at(0), C, init_std, &output, store, tp);
}

Tensor MtpDepth::forward(StepContext& ctx, const Tensor& h, const Tensor& ids, const Tensor& labels, Tensor& h_out) {
  Exec& ex = ctx.ex();
  const int64_t C = hidden_;
  HYTRA_CHECK(h.dim() == 3 && h.size(2) == C, "mtp: hidden state must be (B,T,", C, "), got ", h.desc());
  const Shape shape = h.shape();
  const Shape wide = {shape[0], shape[1], 2 * C};
  ctx.saved<Saved>(this).shape = shape;
  Tensor cat = Tensor::empty(wide, h.dtype(), h.device());  // [enorm(e), hnorm(h)]
  ops::slice_scatter(ex, cat, enorm_->forward(ctx, embedding_->forward(ctx, ids)), 2, 0);
  ops::slice_scatter(ex, cat, hnorm_->forward(ctx, h), 2, C);
  Tensor z = eh_proj_->forward(ctx, cat);
  for (auto& layer : layers_) {
    Tensor next = Tensor::empty(shape, z.dtype(), z.device());
    ops::add(ex, next, z, layer->forward(ctx, z));
    z = next;
  }
  h_out = final_norm_->forward(ctx, z);
  return output_->forward(ctx, h_out, labels);
}

Tensor MtpDepth::backward(StepContext& ctx, const Tensor& dloss, const Tensor& dh_out) {
  Exec& ex = ctx.ex();
  const Shape shape = ctx.saved<Saved>(this).shape;
  const int64_t C = hidden_;
  Tensor dy = output_->backward(ctx, dloss);  // d h_k
  if (dh_out.defined()) ops::axpy(ex, dy, dh_out, 1.0);
  Tensor dz = final_norm_->backward(ctx, dy);
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    // The sum goes to a new tensor: a layer's delayed weight gradients still read the dz it was given.
    const Tensor dx = (*it)->backward(ctx, dz);
    Tensor sum = Tensor::empty(dz.shape(), dz.dtype(), dz.device());
    ops::copy(ex, sum, dz);
    ops::axpy(ex, sum, dx, 1.0);
    dz = sum;
  }
  Tensor dcat = eh_proj_->backward(ctx, dz);  // (B,T,2C)
  Tensor de = Tensor::empty(shape, dcat.dtype(), dcat.device()), dh = Tensor::empty(shape, dcat.dtype(), dcat.device());
  ops::slice_copy(ex, de, dcat, 2, 0);
  ops::slice_copy(ex, dh, dcat, 2, C);
  embedding_->backward(ctx, enorm_->backward(ctx, de));
  return hnorm_->backward(ctx, dh);
}

void MtpDepth::backward_dw(StepContext& ctx) {
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) (*it)->backward_dw(ctx);
  eh_proj_->backward_dw(ctx);
}

}  // namespace hytra
