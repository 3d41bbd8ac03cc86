#include "train/adamw.h"

#include <cmath>

#include "ops/ops.h"

namespace hytra {

AdamW::AdamW(ParamStore& params, const AdamWConfig& cfg) : params_(params), cfg_(cfg) {
  const Tensor& flat = params.flat_values();
  m_flat_ = Tensor::zeros(flat.shape(), flat.dtype() == DType::F64 ? DType::F64 : DType::F32, flat.device());
  v_flat_ = Tensor::zeros(m_flat_.shape(), m_flat_.dtype(), m_flat_.device());
  int64_t offset = 0;
  for (Param* p : params.all()) {
    const int64_t n = shape_numel(p->shape);
    m_.push_back(m_flat_.narrow(0, offset, n).view(p->shape));
    v_.push_back(v_flat_.narrow(0, offset, n).view(p->shape));
    offset += n;
  }
}

void AdamW::step(Exec& ex, double lr) {
  ++step_;
  Tensor no_copy;
  size_t i = 0;
  for (Param* p : params_.all()) {
    const double wd = p->no_decay ? 0.0 : cfg_.weight_decay;
    ops::adamw(ex, p->value, m_[i], v_[i], p->grad, no_copy, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, step_);
    ++i;
  }
}

double grad_global_norm(Exec& ex, ParamStore& params) {
  Tensor& g = params.flat_grads();
  Tensor out = Tensor::empty({1}, g.dtype() == DType::F64 ? DType::F64 : DType::F32, g.device());
  ops::sum_squares(ex, out, g);
  return std::sqrt(out.to_f64_vector()[0]);
}

void clip_grads(Exec& ex, ParamStore& params, double norm, double clip) {
  if (clip <= 0) return;
  const double coeff = clip / (norm + 1e-6);
  if (coeff >= 1.0) return;
  ops::scale(ex, params.flat_grads(), coeff);
}

}  // namespace hytra
