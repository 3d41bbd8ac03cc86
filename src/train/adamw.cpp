#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

#include "ops/ops.h"

namespace hytra {

std::vector<Tensor> param_views(ParamStore& params, const Tensor& flat) {
  std::vector<Tensor> out;
  for (Param* p : params.all()) out.push_back(flat.narrow(0, p->offset, shape_numel(p->shape)).view(p->shape));
  return out;
}

AdamW::AdamW(ParamStore& params, const AdamWConfig& cfg, std::vector<FlatRange> parts)
    : params_(params), cfg_(cfg), parts_(std::move(parts)) {
  const Tensor& flat = params.flat_master();
  if (parts_.empty()) parts_.push_back({0, flat.numel()});
  int64_t moments = 0, last_end = 0;
  for (const FlatRange& r : parts_) {
    HYTRA_ASSERT(last_end <= r.begin && r.begin <= r.end && r.end <= flat.numel(), "AdamW: the part [", r.begin, ", ",
                 r.end, ") is outside the parameter buffer of ", flat.numel(), " or not after the previous part");
    last_end = r.end;
    // Consecutive parameters with the same decay form one span (with the zero padding between them: it stays
    // zero), clipped to the part.
    bool open = false;  // the last span continues in this part
    for (Param* p : params.all()) {
      const int64_t lo = std::max(p->offset, r.begin), hi = std::min(p->offset + shape_numel(p->shape), r.end);
      if (lo >= hi) continue;
      const double wd = p->no_decay ? 0.0 : cfg_.weight_decay;
      if (!open || spans_.back().weight_decay != wd)
        spans_.push_back({lo, hi - lo, moments + lo - r.begin, wd});
      else
        spans_.back().len = hi - spans_.back().offset;
      open = true;
    }
    moments += r.size();
  }
  m_flat_ = Tensor::zeros({moments}, flat.dtype() == DType::F64 ? DType::F64 : DType::F32, flat.device());
  v_flat_ = Tensor::zeros(m_flat_.shape(), m_flat_.dtype(), m_flat_.device());
}

OptimizerState AdamW::state() const {
  HYTRA_ASSERT(parts_.size() == 1 && parts_[0].begin == 0 && parts_[0].end == params_.flat_master().numel(),
               "AdamW::state: a sharded optimizer");
  return {step_, param_views(params_, m_flat_), param_views(params_, v_flat_)};
}

void AdamW::step(Exec& ex, double lr, double grad_scale) {
  ++step_;
  Tensor& master = params_.flat_master();
  Tensor& grads = params_.flat_grads();
  const bool copy = params_.has_separate_master();
  for (const Span& s : spans_) {
    Tensor p = master.narrow(0, s.offset, s.len), m = m_flat_.narrow(0, s.moment, s.len);
    Tensor v = v_flat_.narrow(0, s.moment, s.len), g = grads.narrow(0, s.offset, s.len);
    Tensor p_copy = copy ? params_.flat_values().narrow(0, s.offset, s.len) : Tensor();
    ops::adamw(ex, p, m, v, g, p_copy, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, s.weight_decay, grad_scale, step_);
  }
}

double clip_coefficient(double norm, double clip) {
  if (clip <= 0) return 1.0;
  const double coeff = clip / (norm + 1e-6);
  return coeff < 1.0 ? coeff : 1.0;
}

}  // namespace hytra
