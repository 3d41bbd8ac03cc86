#include "nn/moe/experts.h"

#include "core/error.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace hytra {

namespace {
// Creates one projection's weights (out, in) and biases (out) in `layout`, for this rank's E experts of ep.size x E
// (expert parallelism: experts [ep.rank E, (ep.rank + 1) E), named by their global index; a grouped tensor is this
// rank's slice of the whole one).
void create_proj(std::vector<Param*>& w, std::vector<Param*>& b, const std::string& name, int64_t E, int64_t out,
                 int64_t in, double std, bool bias, ExpertLayout wl, ExpertLayout bl, const ExpertParallel& ep,
                 ParamStore& store) {
  const int64_t first = ep.rank * E;
  auto expert_slice = [&](Param& p) {
    if (ep.on()) p.shard = ParamShard{0, {E * ep.size}, ep.size, ep.rank, true};
  };
  if (wl == ExpertLayout::Indexed) {
    for (int64_t e = 0; e < E; ++e) {
      w.push_back(&store.create(name + "weight" + std::to_string(first + e), {out, in}, InitKind::Normal, std, false));
      w.back()->follows_previous = e > 0;  // the list is read as one (E, out, in) tensor
    }
  } else if (wl == ExpertLayout::Grouped) {
    Param& p = store.create(name + "weight", {E, out, in}, InitKind::Normal, std, false);
    p.init_groups = E * ep.size;  // of the whole tensor, which the init draws
    expert_slice(p);
    w.push_back(&p);
  } else {
    w.push_back(&store.create(name + "weight", {out, in}, InitKind::Normal, std, false));
  }
  if (!bias) return;
  if (bl == ExpertLayout::Indexed) {
    for (int64_t e = 0; e < E; ++e) {
      b.push_back(&store.create(name + "bias" + std::to_string(first + e), {out}, InitKind::Zeros, 0.0, true));
      b.back()->follows_previous = e > 0;
    }
  } else if (bl == ExpertLayout::Grouped) {
    b.push_back(&store.create(name + "bias", {E, out}, InitKind::Zeros, 0.0, true));
    expert_slice(*b.back());
  } else {
    b.push_back(&store.create(name + "bias", {out}, InitKind::Zeros, 0.0, true));
  }
}
}  // namespace

namespace {
// The parameters `ps` (one per expert, each of shape `one`, consecutive in their buffer) or their gradients
// as one (E, one...) tensor; a single parameter is viewed with a leading 1 unless it already has E first.
Tensor stacked(const std::vector<Param*>& ps, const Shape& one, bool grad) {
  const Tensor& first = grad ? ps[0]->grad : ps[0]->value;
  Shape shape = one;
  shape.insert(shape.begin(), int64_t(ps.size()));
  if (ps.size() == 1) return first.view(shape);
  const size_t bytes = first.nbytes();
  for (size_t e = 1; e < ps.size(); ++e) {
    const Tensor& t = grad ? ps[e]->grad : ps[e]->value;
    HYTRA_CHECK(static_cast<const char*>(t.raw()) == static_cast<const char*>(first.raw()) + e * bytes,
                "experts: parameter ", ps[e]->name, " does not follow ", ps[e - 1]->name, " in memory");
  }
  return Tensor::borrow(first.raw(), shape, first.dtype(), first.device());
}

// y = a op(w_e) over the experts' rows (a plain GEMM when offsets is undefined: one expert, w (1, ., .); there
// beta 1 adds to y).
void expert_gemm(Exec& ex, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets, bool trans_w,
                 float beta = 0.0f) {
  if (offsets.defined())
    ops::grouped_gemm(ex, y, a, w, offsets, trans_w);
  else
    ops::gemm(ex, y, a, w.view({w.size(1), w.size(2)}), false, trans_w, 1.0f, beta);
}

// dw_e = beta dw_e + dy_e^T x_e.
void expert_wgrad(Exec& ex, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets, float beta) {
  if (offsets.defined()) {
    ops::grouped_gemm_wgrad(ex, dw, dy, x, offsets, beta);
  } else {
    Tensor d = dw.view({dw.size(1), dw.size(2)});
    ops::gemm(ex, d, dy, x, true, false, 1.0f, beta);
  }
}

// The beta of the next write of the projection's weight gradients (their first write after a lazy zero_grad
// overwrites; the parameters of one projection are always written together).
float weights_beta(const std::vector<Param*>& ws) {
  float beta = 1.0f;
  for (Param* p : ws) beta = p->grad_beta();
  return beta;
}

// t in the statistics dtype (fp32; fp64 in fp64 runs): a copy of t when it is in another dtype.
Tensor in_stat_dtype(Exec& ex, const Tensor& t) {
  const DType sd = stat_dtype(t.dtype());
  if (t.dtype() == sd) return t;
  Tensor c = Tensor::empty(t.shape(), sd, t.device());
  ops::copy(ex, c, t);
  return c;
}

// y += a op(b_e) for the bias terms (a (R,1): ones or the probabilities; b (E, out, 1)), the products summed in
// the statistics dtype and rounded once into y, as a beta-1 GEMM would.
void add_expert_gemm(Exec& ex, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets, bool trans_w) {
  if (!offsets.defined()) {
    ops::gemm(ex, y, a, w.view({w.size(1), w.size(2)}), false, trans_w, 1.0f, 1.0f);
    return;
  }
  const Tensor a32 = in_stat_dtype(ex, a), w32 = in_stat_dtype(ex, w);
  Tensor t = Tensor::empty(y.shape(), a32.dtype(), y.device());
  ops::grouped_gemm(ex, t, a32, w32, offsets, trans_w);
  ops::axpy(ex, y, t, 1.0);
}
}  // namespace

Tensor GroupedExperts::Proj::weights(bool grad) const {
  const Tensor& t = grad ? w[0]->grad : w[0]->value;
  const Shape one = t.dim() == 3 ? Shape{t.size(1), t.size(2)} : Shape{t.size(0), t.size(1)};
  return w.size() == 1 && t.dim() == 3 ? t : stacked(w, one, grad);
}

Tensor GroupedExperts::Proj::biases(bool grad) const {
  const Tensor& t = grad ? b[0]->grad : b[0]->value;
  if (b.size() == 1 && t.dim() == 2) return t.view({t.size(0), t.size(1), 1});
  return stacked(b, {t.size(0), 1}, grad);
}

GroupedExperts::GroupedExperts(const ExpertsOptions& whole, const std::string& prefix, ParamStore& store)
    : opt_(whole) {
  // Grouped tensors split over both groups are not built (ModelConfig's check names it).
  HYTRA_ASSERT(!whole.ep.on() || (whole.num_experts % whole.ep.size == 0 &&
                                  (!whole.tp.on() || (whole.weight_layout != ExpertLayout::Grouped &&
                                                      (!whole.bias || whole.bias_layout != ExpertLayout::Grouped)))),
               prefix);
  opt_.ffn = whole.tp.local(whole.ffn);
  opt_.num_experts = whole.num_experts / whole.ep.size;  // expert parallelism: this rank's experts
  const ExpertsOptions& o = opt_;
  HYTRA_CHECK(o.num_experts >= 1 && o.hidden > 0 && o.ffn > 0, prefix, ": experts, hidden and ffn must be positive");
  HYTRA_CHECK(o.weight_layout != ExpertLayout::Single || o.num_experts == 1, prefix,
              ": the plain (shared-expert) layout holds one expert");
  create_proj(fc1_.w, fc1_.b, prefix + "linear_fc1.", o.num_experts, fc1_out(), o.hidden, o.init_std, o.bias,
              o.weight_layout, o.bias_layout, o.ep, store);
  create_proj(fc2_.w, fc2_.b, prefix + "linear_fc2.", o.num_experts, o.hidden, o.ffn, o.output_init_std, o.bias,
              o.weight_layout, o.bias_layout, o.ep, store);
  for (auto* ps : {&fc1_.w, &fc1_.b, &fc2_.w, &fc2_.b})
    for (Param* p : *ps) p->expert_parallel = o.ep.on();
  for (Param* p : fc1_.w) p->grad_by_overwrite = true;  // every write is expert_wgrad with weights_beta()
  for (Param* p : fc2_.w) p->grad_by_overwrite = true;
  // Tensor parallelism: the out dim of fc1 (per GLU half; an interleaved layout splits into whole blocks) and the in
  // dim of fc2; a tensor with the experts first has them one dim further.
  const std::vector<int64_t> fc1_parts =
      glu() && o.glu_interleave == 0 ? std::vector<int64_t>{o.ffn, o.ffn} : std::vector<int64_t>{fc1_out()};
  for (Param* p : fc1_.w) shard_param(*p, o.tp, p->shape.size() == 3 ? 1 : 0, fc1_parts);
  for (Param* p : fc1_.b) shard_param(*p, o.tp, p->shape.size() == 2 ? 1 : 0, fc1_parts);
  for (Param* p : fc2_.w) shard_param(*p, o.tp, p->shape.size() == 3 ? 2 : 1, {o.ffn});
  for (Param* p : fc2_.b) partial_grad_param(*p, o.tp);
  fc2_bias_here_ = o.bias && o.tp.rank == 0;
}

bool GroupedExperts::glu() const {
  return opt_.activation == ops::ExpertActivation::SwiGLU || opt_.activation == ops::ExpertActivation::QuickGeGLU;
}

Tensor GroupedExperts::forward(StepContext& ctx, const Tensor& x, const Tensor& probs, const Tensor& offsets,
                               Tensor* add_to) {
  Exec& ex = ctx.ex();
  const int64_t R = x.size(0), F = opt_.ffn, F1 = fc1_out();
  HYTRA_CHECK(offsets.defined() || opt_.num_experts == 1, "experts: ", opt_.num_experts,
              " experts need their row offsets");
  HYTRA_ASSERT(add_to == nullptr || !offsets.defined(), "experts: add_to needs the single-expert path");
  const DType dt = x.dtype();
  const Device dev = x.device();
  Saved& s = ctx.saved<Saved>(this);
  s.x = x;
  s.probs = probs;
  s.offsets = offsets;
  s.h = Tensor::empty({R, F1}, dt, dev);
  s.a = Tensor::empty({R, F}, dt, dev);
  Tensor y = add_to != nullptr ? *add_to : Tensor::empty({R, opt_.hidden}, dt, dev);
  if (opt_.bias) {
    s.p = Tensor::empty({R, 1}, dt, dev);
    ops::copy(ex, s.p, probs);
  }
  const Tensor w1 = fc1_.weights(false), w2 = fc2_.weights(false);
  if (glu() && offsets.defined() && !opt_.bias) {  // fc1 + activation in one
    ops::grouped_gemm_glu(ex, s.h, s.a, x, w1, offsets, probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset,
                          opt_.clamp);
  } else {
    expert_gemm(ex, s.h, x, w1, offsets, true);
    if (opt_.bias)
      add_expert_gemm(ex, s.h, ones_column(ex, R, offsets.defined() ? stat_dtype(dt) : dt, dev), fc1_.biases(false),
                      offsets, true);
    ops::moe_act_fwd(ex, s.a, s.h, probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset, opt_.clamp);
  }
  expert_gemm(ex, y, s.a, w2, offsets, true, add_to != nullptr ? 1.0f : 0.0f);
  if (fc2_bias_here_)
    add_expert_gemm(ex, y, offsets.defined() ? probs.view({R, 1}) : s.p, fc2_.biases(false), offsets, true);
  if (opt_.recompute_act) s.a = Tensor();
  return y;
}

Tensor GroupedExperts::backward(StepContext& ctx, const Tensor& dy, Tensor& dprobs, Tensor* add_to) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t R = s.x.size(0), F = opt_.ffn, F1 = fc1_out();
  const DType dt = s.x.dtype();
  const Device dev = s.x.device();
  if (!s.a.defined()) {  // selective recompute "moe_act": fc2's input again
    s.a = Tensor::empty({R, F}, dt, dev);
    ops::moe_act_fwd(ex, s.a, s.h, s.probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset, opt_.clamp);
  }
  // The weight-gradient GEMMs, now or queued (the tensors are kept alive by the task).
  auto wgrad = [&](std::function<void()> task) {
    if (ctx.delay_wgrad)
      ctx.push_wgrad(this, std::move(task));
    else
      task();
  };
  const Tensor offsets = s.offsets;
  Tensor da = Tensor::empty({R, F}, dt, dev);
  expert_gemm(ex, da, dy, fc2_.weights(false), offsets, false);
  {
    Tensor dw = fc2_.weights(true), a = s.a, p = s.p, db = fc2_bias_here_ ? fc2_.biases(true) : Tensor();
    const float beta = weights_beta(fc2_.w);
    wgrad([&ex, dw, dy, a, p, db, offsets, beta]() mutable {
      expert_wgrad(ex, dw, dy, a, offsets, beta);
      if (db.defined()) expert_wgrad(ex, db, dy, p, offsets, 1.0f);
    });
  }
  Tensor dh = Tensor::empty({R, F1}, dt, dev);
  ops::moe_act_bwd(ex, dh, dprobs, da, s.h, s.probs, opt_.activation, opt_.glu_interleave, opt_.linear_offset,
                   opt_.clamp);
  if (fc2_bias_here_) {  // dprobs += dy . b2 per row (fc2's bias term)
    Tensor dpb = Tensor::empty({R, 1}, dprobs.dtype(), dev);
    if (offsets.defined())  // in the statistics dtype, as the plain GEMM below accumulates and stores
      ops::grouped_gemm(ex, dpb, in_stat_dtype(ex, dy), in_stat_dtype(ex, fc2_.biases(false)), offsets, false);
    else
      ops::gemm(ex, dpb, dy, fc2_.biases(false).view({opt_.hidden, 1}), false, false, 1.0f, 0.0f);
    ops::axpy(ex, dprobs, dpb.view({R}), 1.0);
  }
  HYTRA_ASSERT(add_to == nullptr || !offsets.defined(), "experts: add_to needs the single-expert path");
  Tensor dx = add_to != nullptr ? *add_to : Tensor::empty({R, opt_.hidden}, dt, dev);
  expert_gemm(ex, dx, dh, fc1_.weights(false), offsets, false, add_to != nullptr ? 1.0f : 0.0f);
  {
    Tensor dw = fc1_.weights(true), x = s.x, db = opt_.bias ? fc1_.biases(true) : Tensor();
    Tensor ones = opt_.bias ? ones_column(ex, R, dt, dev) : Tensor();
    const float beta = weights_beta(fc1_.w);
    wgrad([&ex, dw, dh, x, db, ones, offsets, beta]() mutable {
      expert_wgrad(ex, dw, dh, x, offsets, beta);
      if (db.defined()) expert_wgrad(ex, db, dh, ones, offsets, 1.0f);
    });
  }
  s = Saved{};  // queued weight-gradient tasks hold their own tensors
  return dx;
}

}  // namespace hytra
