#include "nn/moe/experts.h"

#include "core/error.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace hytra {

namespace {
// Creates one projection's weights (out, in) and biases (out) in `layout`.
void create_proj(std::vector<Param*>& w, std::vector<Param*>& b, const std::string& name, int64_t E, int64_t out,
                 int64_t in, double std, bool bias, ExpertLayout wl, ExpertLayout bl, ParamStore& store) {
  if (wl == ExpertLayout::Indexed) {
    for (int64_t e = 0; e < E; ++e)
      w.push_back(&store.create(name + "weight" + std::to_string(e), {out, in}, InitKind::Normal, std, false));
  } else if (wl == ExpertLayout::Grouped) {
    Param& p = store.create(name + "weight", {E, out, in}, InitKind::Normal, std, false);
    p.init_groups = E;
    w.push_back(&p);
  } else {
    w.push_back(&store.create(name + "weight", {out, in}, InitKind::Normal, std, false));
  }
  if (!bias) return;
  if (bl == ExpertLayout::Indexed) {
    for (int64_t e = 0; e < E; ++e)
      b.push_back(&store.create(name + "bias" + std::to_string(e), {out}, InitKind::Zeros, 0.0, true));
  } else if (bl == ExpertLayout::Grouped) {
    b.push_back(&store.create(name + "bias", {E, out}, InitKind::Zeros, 0.0, true));
  } else {
    b.push_back(&store.create(name + "bias", {out}, InitKind::Zeros, 0.0, true));
  }
}
}  // namespace

Tensor GroupedExperts::Proj::weight(int64_t e, int64_t out, int64_t in, bool grad) const {
  const Param* p = w.size() == 1 ? w[0] : w[size_t(e)];
  const Tensor& t = grad ? p->grad : p->value;
  return w.size() == 1 && t.dim() == 3 ? t.narrow(0, e, 1).view({out, in}) : t;
}

Tensor GroupedExperts::Proj::bias(int64_t e, int64_t out, bool grad) const {
  const Param* p = b.size() == 1 ? b[0] : b[size_t(e)];
  const Tensor& t = grad ? p->grad : p->value;
  return b.size() == 1 && t.dim() == 2 ? t.narrow(0, e, 1).view({out}) : t;
}

GroupedExperts::GroupedExperts(const ExpertsOptions& o, const std::string& prefix, ParamStore& store) : opt_(o) {
  HYTRA_CHECK(o.num_experts >= 1 && o.hidden > 0 && o.ffn > 0, prefix, ": experts, hidden and ffn must be positive");
  HYTRA_CHECK(o.weight_layout != ExpertLayout::Single || o.num_experts == 1, prefix,
              ": the plain (shared-expert) layout holds one expert");
  create_proj(fc1_.w, fc1_.b, prefix + "linear_fc1.", o.num_experts, fc1_out(), o.hidden, o.init_std, o.bias,
              o.weight_layout, o.bias_layout, store);
  create_proj(fc2_.w, fc2_.b, prefix + "linear_fc2.", o.num_experts, o.hidden, o.ffn, o.output_init_std, o.bias,
              o.weight_layout, o.bias_layout, store);
}

bool GroupedExperts::glu() const {
  return opt_.activation == ops::ExpertActivation::SwiGLU || opt_.activation == ops::ExpertActivation::QuickGeGLU;
}

Tensor GroupedExperts::forward(StepContext& ctx, const Tensor& x, const Tensor& probs,
                               const std::vector<int64_t>& rows_per_expert) {
  Exec& ex = ctx.ex();
  const int64_t R = x.size(0), C = opt_.hidden, F = opt_.ffn, F1 = fc1_out();
  HYTRA_CHECK(int64_t(rows_per_expert.size()) == opt_.num_experts, "experts: expected ", opt_.num_experts,
              " row counts, got ", rows_per_expert.size());
  int64_t rows = 0;
  for (int64_t n : rows_per_expert) rows += n;
  HYTRA_CHECK(rows == R, "experts: row counts sum to ", rows, ", expected ", R);
  const DType dt = x.dtype();
  const Device dev = x.device();
  Saved& s = ctx.saved<Saved>(this);
  s.x = x;
  s.probs = probs;
  s.rows = rows_per_expert;
  s.h = Tensor::empty({R, F1}, dt, dev);
  s.a = Tensor::empty({R, F}, dt, dev);
  Tensor y = Tensor::empty({R, C}, dt, dev);
  if (opt_.bias) {
    s.p = Tensor::empty({R, 1}, dt, dev);
    ops::copy(ex, s.p, probs);
  }
  int64_t o = 0;
  for (int64_t e = 0; e < opt_.num_experts; ++e) {
    const int64_t n = rows_per_expert[size_t(e)];
    if (n == 0) continue;
    Tensor xe = x.narrow(0, o, n), he = s.h.narrow(0, o, n);
    ops::gemm(ex, he, xe, fc1_.weight(e, F1, C, false), false, true, 1.0f, 0.0f);
    if (opt_.bias) ops::gemm(ex, he, ones_column(ex, n, dt, dev), fc1_.bias(e, F1, false).view({1, F1}), false, false, 1.0f, 1.0f);
    o += n;
  }
  ops::moe_act_fwd(ex, s.a, s.h, probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset, opt_.clamp);
  o = 0;
  for (int64_t e = 0; e < opt_.num_experts; ++e) {
    const int64_t n = rows_per_expert[size_t(e)];
    if (n == 0) continue;
    Tensor ye = y.narrow(0, o, n);
    ops::gemm(ex, ye, s.a.narrow(0, o, n), fc2_.weight(e, C, F, false), false, true, 1.0f, 0.0f);
    if (opt_.bias) ops::gemm(ex, ye, s.p.narrow(0, o, n), fc2_.bias(e, C, false).view({1, C}), false, false, 1.0f, 1.0f);
    o += n;
  }
  if (opt_.recompute_act) s.a = Tensor();
  return y;
}

Tensor GroupedExperts::backward(StepContext& ctx, const Tensor& dy, Tensor& dprobs) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t R = s.x.size(0), C = opt_.hidden, F = opt_.ffn, F1 = fc1_out();
  const DType dt = s.x.dtype();
  const Device dev = s.x.device();
  if (!s.a.defined()) {  // selective recompute "moe_act": fc2's input again
    s.a = Tensor::empty({R, F}, dt, dev);
    ops::moe_act_fwd(ex, s.a, s.h, s.probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset, opt_.clamp);
  }
  Tensor da = Tensor::empty({R, F}, dt, dev);
  Tensor dprobs_bias;  // (R,1) dy . b2 per row (fc2 bias term)
  if (opt_.bias) dprobs_bias = Tensor::empty({R, 1}, dprobs.dtype(), dev);
  // The weight-gradient GEMMs of one expert, now or queued (the tensors are kept alive by the task).
  auto wgrad = [&](std::function<void()> task) {
    if (ctx.delay_wgrad)
      ctx.push_wgrad(this, std::move(task));
    else
      task();
  };
  int64_t o = 0;
  for (int64_t e = 0; e < opt_.num_experts; ++e) {
    const int64_t n = s.rows[size_t(e)];
    if (n == 0) continue;
    Tensor dye = dy.narrow(0, o, n), dae = da.narrow(0, o, n);
    ops::gemm(ex, dae, dye, fc2_.weight(e, C, F, false), false, false, 1.0f, 0.0f);
    if (opt_.bias) {
      Tensor dpe = dprobs_bias.narrow(0, o, n);
      ops::gemm(ex, dpe, dye, fc2_.bias(e, C, false).view({C, 1}), false, false, 1.0f, 0.0f);
    }
    Tensor ae = s.a.narrow(0, o, n), dw = fc2_.weight(e, C, F, true);
    Tensor pe = opt_.bias ? s.p.narrow(0, o, n) : Tensor();
    Tensor db = opt_.bias ? fc2_.bias(e, C, true).view({C, 1}) : Tensor();
    wgrad([&ex, dye, ae, dw, pe, db]() mutable {
      ops::gemm(ex, dw, dye, ae, true, false, 1.0f, 1.0f);
      if (pe.defined()) ops::gemm(ex, db, dye, pe, true, false, 1.0f, 1.0f);
    });
    o += n;
  }
  Tensor dh = Tensor::empty({R, F1}, dt, dev);
  ops::moe_act_bwd(ex, dh, dprobs, da, s.h, s.probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset,
                   opt_.clamp);
  if (opt_.bias) ops::axpy(ex, dprobs, dprobs_bias.view({R}), 1.0);
  Tensor dx = Tensor::empty({R, C}, dt, dev);
  o = 0;
  for (int64_t e = 0; e < opt_.num_experts; ++e) {
    const int64_t n = s.rows[size_t(e)];
    if (n == 0) continue;
    Tensor dhe = dh.narrow(0, o, n), dxe = dx.narrow(0, o, n), xe = s.x.narrow(0, o, n);
    ops::gemm(ex, dxe, dhe, fc1_.weight(e, F1, C, false), false, false, 1.0f, 0.0f);
    Tensor dw = fc1_.weight(e, F1, C, true);
    Tensor db = opt_.bias ? fc1_.bias(e, F1, true).view({F1, 1}) : Tensor();
    Tensor ones = opt_.bias ? ones_column(ex, n, dt, dev) : Tensor();
    wgrad([&ex, dhe, xe, dw, db, ones]() mutable {
      ops::gemm(ex, dw, dhe, xe, true, false, 1.0f, 1.0f);
      if (db.defined()) ops::gemm(ex, db, dhe, ones, true, false, 1.0f, 1.0f);
    });
    o += n;
  }
  s = Saved{};  // queued weight-gradient tasks hold their own tensors
  return dx;
}

}  // namespace hytra
