#include "train/adamw.h"

#include <cmath>

#include "ops/ops.h"

namespace hytra {

AdamW::AdamW(ParamStore& params, const AdamWConfig& cfg) : params_(params), cfg_(cfg) {
  const Tensor& flat = params.flat_master();
  m_flat_ = Tensor::zeros(flat.shape(), flat.dtype() == DType::F64 ? DType::F64 : DType::F32, flat.device());
  v_flat_ = Tensor::zeros(m_flat_.shape(), m_flat_.dtype(), m_flat_.device());
  for (Param* p : params.all()) {
    const int64_t n = shape_numel(p->shape);
    m_.push_back(m_flat_.narrow(0, p->offset, n).view(p->shape));
    v_.push_back(v_flat_.narrow(0, p->offset, n).view(p->shape));
    // Consecutive parameters with the same decay form one span of the flat buffers (with the zero padding
    // between them: it stays zero).
    const double wd = p->no_decay ? 0.0 : cfg_.weight_decay;
    if (spans_.empty() || spans_.back().weight_decay != wd)
      spans_.push_back({p->offset, n, wd});
    else
      spans_.back().len = p->offset + n - spans_.back().offset;
  }
}

void AdamW::step(Exec& ex, double lr, double grad_scale) {
  ++step_;
  Tensor& master = params_.flat_master();
  Tensor& grads = params_.flat_grads();
  const bool copy = params_.has_separate_master();
  for (const Span& s : spans_) {
    Tensor p = master.narrow(0, s.offset, s.len), m = m_flat_.narrow(0, s.offset, s.len);
    Tensor v = v_flat_.narrow(0, s.offset, s.len), g = grads.narrow(0, s.offset, s.len);
    Tensor p_copy = copy ? params_.flat_values().narrow(0, s.offset, s.len) : Tensor();
    ops::adamw(ex, p, m, v, g, p_copy, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, s.weight_decay, grad_scale, step_);
  }
}

double grad_global_norm(Exec& ex, ParamStore& params) {
  Tensor& g = params.flat_grads();
  Tensor out = Tensor::empty({1}, g.dtype() == DType::F64 ? DType::F64 : DType::F32, g.device());
  ops::sum_squares(ex, out, g);
  return std::sqrt(out.to_f64_vector()[0]);
}

double clip_coefficient(double norm, double clip) {
  if (clip <= 0) return 1.0;
  const double coeff = clip / (norm + 1e-6);
  return coeff < 1.0 ? coeff : 1.0;
}

}  // namespace hytra
