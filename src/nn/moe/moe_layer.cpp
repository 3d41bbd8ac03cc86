#include "nn/moe/moe_layer.h"

#include "core/error.h"
#include "nn/linear.h"
#include "nn/moe/expert_dispatch.h"
#include "nn/module.h"
#include "nn/recompute.h"

namespace hytra {

MoeLayer::MoeLayer(const MoeOptions& o, const std::string& prefix, int64_t layer_number, ParamStore& store) : opt_(o) {
  norm_ = std::make_unique<Norm>(NormOptions{o.norm, o.hidden, o.norm_eps}, prefix + "pre_mlp_layernorm.", store);
  norm_->sequence_parallel_grads(o.experts.tp);
  router_ = std::make_unique<TopKRouter>(o.router, prefix, store);
  router_->set_layer_number(layer_number);
  experts_ = std::make_unique<GroupedExperts>(o.experts, prefix + "mlp.experts.", store);
  if (o.shared_ffn > 0) {
    ExpertsOptions s = o.experts;
    s.ep = {};  // the shared experts are whole on every rank
    s.ffn = o.shared_ffn;
    s.num_experts = 1;
    s.activation = o.shared_activation;
    s.glu_interleave = 0;
    s.clamp = 0.0;
    s.weight_layout = s.bias_layout = ExpertLayout::Single;
    shared_ = std::make_unique<GroupedExperts>(s, prefix + "mlp.shared_experts.", store);
    if (o.shared_gate) {
      RouterOptions g;
      g.hidden = o.hidden;
      g.num_experts = 1;
      g.topk = 1;
      g.score = ops::RouterScore::Sigmoid;
      g.fp32_logits = o.router.fp32_logits;
      g.balancing = LoadBalancing::None;
      g.init_std = o.router.init_std;
      g.weight_key = "mlp.shared_experts.gate_weight";
      gate_ = std::make_unique<TopKRouter>(g, prefix, store);
    }
  }
}

Tensor MoeLayer::forward_body(StepContext& ctx, const Tensor& input) {
  Exec& ex = ctx.ex();
  const TensorParallel& tp = opt_.experts.tp;
  // Sequence parallelism: the routers and experts see the whole sequence (the same routing on every rank).
  const Tensor y = tp.seq() ? seq_gather(ex, tp, input) : input;
  HYTRA_CHECK(y.dim() == 3 && y.size(2) == opt_.hidden, "mlp: input must be (B,T,", opt_.hidden, "), got ", y.desc());
  const int64_t B = y.size(0), N = y.numel() / opt_.hidden, C = opt_.hidden, K = opt_.router.topk;
  const Device dev = y.device();
  const Tensor y2 = y.view({N, C});
  TopKRouter::Routing r = router_->forward(ctx, y, B);
  Saved& s = ctx.saved<Saved>(this);
  s.tokens = N;
  const bool count = ctx.grad_enabled && !ctx.recomputing;  // training passes count routed tokens
  Tensor scratch;
  Tensor& counter =
      count ? router_->token_counter(dev) : (scratch = zeros_on(ex, {opt_.router.num_experts}, DType::I32, dev));
  if (plan_is_dropless(opt_.dispatch))
    s.plan = plan_dropless(ex, r.top, opt_.dispatch, dropless_offsets_, counter);
  else  // R_max rows, the experts' groups covering the used ones: the rest are gathered and never read
    s.plan = plan_capacity(ex, r.top, r.probs, opt_.dispatch, counter);
  const int64_t R = s.plan.rows;

  Tensor x_perm = Tensor::empty({R, C}, y.dtype(), dev);
  ops::gather_rows(ex, x_perm, y2, s.plan.row_token);
  // Row probabilities: the choice's, or 0 for padding rows (index N*K of an extended table).
  Tensor table = zeros_on(ex, {N * K + 1, 1}, r.probs.dtype(), dev);
  ops::slice_scatter(ex, table, r.probs.view({N * K, 1}), 0, 0);
  Tensor p_perm = Tensor::empty({R, 1}, r.probs.dtype(), dev);
  ops::gather_rows(ex, p_perm, table, s.plan.row_prob);
  // The EP-overlap schedule's slots (docs/spec/ep_overlap.md §1): pre-dispatch (above), dispatch, experts, combine.
  const ExpertParallel& ep = opt_.experts.ep;
  const bool uniform = opt_.dispatch.pad_to_capacity;  // every expert R / E rows from every rank
  if (ep.on() && uniform && uniform_.used != R)
    uniform_ = uniform_exchange(ex, ep, opt_.router.num_experts, R / opt_.router.num_experts);
  if (ep.on() && !uniform) counts_.start(ex, ep, s.plan.expert_offsets);  // the token counts' trip to the host
  ctx.handover(Handover::BeforeDispatch);
  Tensor out_perm;
  if (ep.on()) {  // each expert's rows to its rank and back (nn/moe/expert_dispatch.h)
    s.exchange = uniform ? uniform_ : counts_.finish(ex, ep);
    const ExpertExchange& xc = s.exchange;
    RowTransfer xt = send_to_experts(ep, xc, x_perm), pt = send_to_experts(ep, xc, p_perm);
    ctx.handover(Handover::BeforeExperts);
    const Tensor x_local = arrive_at_experts(ex, ep, xc, xt), p_local = arrive_at_experts(ex, ep, xc, pt);
    Tensor y_local = xc.rows > 0 ? experts_->forward(ctx, x_local, p_local.view({xc.rows}), xc.local_offsets)
                                 : Tensor::empty({0, C}, y.dtype(), dev);
    RowTransfer back = send_from_experts(ex, ep, xc, y_local, R);
    ctx.handover(Handover::AfterCombine);
    out_perm = arrive_from_experts(ep, back);
  } else {
    ctx.handover(Handover::BeforeExperts);
    out_perm = experts_->forward(ctx, x_perm, p_perm.view({R}), s.plan.expert_offsets);
    ctx.handover(Handover::AfterCombine);
  }
  Tensor out = Tensor::empty({N, C}, y.dtype(), dev);
  ops::scatter_add_rows(ex, out, out_perm, s.plan.token_offsets, s.plan.token_rows);
  if (shared_) {
    Tensor g;
    if (gate_) {
      g = gate_->forward(ctx, y, B).probs.view({N});
    } else {
      g = Tensor::empty({N}, r.probs.dtype(), dev);
      ops::fill(ex, g, 1.0);
    }
    const bool drop = opt_.recompute_shared && !ctx.recomputing;  // keep the inputs only
    if (drop) {
      s.shared_rerun = true;
      s.shared_in = y2;
      s.shared_gate = g;
    }
    DropScope keep(ctx, drop);
    shared_->forward(ctx, y2, g, Tensor(), &out);  // out += the shared experts' output
  }
  // Tensor parallelism: each rank's channels' part, summed (sequence parallelism: this rank's tokens of the sum).
  Tensor result = out.view(y.shape());
  if (tp.seq())
    result = seq_reduce_scatter(ex, tp, result);
  else
    tp_all_reduce(tp, out);
  if (opt_.recompute_norm && !ctx.recomputing) {  // the norm output is rebuilt in backward
    router_->forget_input(ctx);
    if (gate_) gate_->forget_input(ctx);
    if (shared_ && !s.shared_rerun) shared_->forget_input(ctx);
    s.shared_in = Tensor();
    s.norm_dropped = true;
  }
  return result;
}

Tensor MoeLayer::backward_body(StepContext& ctx, const Tensor& grad) {
  ctx.handover(Handover::BeforeCombineBackward);
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const TensorParallel& tp = opt_.experts.tp;
  const Tensor df = tp.seq() ? seq_gather(ex, tp, grad) : grad;  // the whole sequence's
  const int64_t N = s.tokens, C = opt_.hidden, K = opt_.router.topk, R = s.plan.rows;
  if (s.norm_dropped) {  // selective "layernorm": pre_mlp_layernorm's output again
    Tensor y = norm_->recompute_output(ctx);
    if (tp.seq()) y = seq_gather(ex, tp, y.view(grad.shape())).view({N, C});
    router_->restore_input(ctx, y);
    if (gate_) gate_->restore_input(ctx, y);
    if (shared_ && !s.shared_rerun) shared_->restore_input(ctx, y);
    if (s.shared_rerun) s.shared_in = y;
  }
  const Device dev = df.device();
  const DType sd = stat_dtype(df.dtype());
  const Tensor df2 = df.view({N, C});
  Tensor dout_perm = Tensor::empty({R, C}, df.dtype(), dev);
  ops::gather_rows(ex, dout_perm, df2, s.plan.row_token);
  Tensor dp_perm = Tensor::empty({R}, sd, dev);
  Tensor dx_perm;
  const ExpertParallel& ep = opt_.experts.ep;
  if (ep.on()) {
    const ExpertExchange& xc = s.exchange;
    // Every rank takes part in each exchange, also one whose experts got no rows.
    RowTransfer dt = send_to_experts(ep, xc, dout_perm);
    ctx.handover(Handover::BeforeExpertsBackward);
    const Tensor dout_local = arrive_at_experts(ex, ep, xc, dt);
    Tensor dp_local = Tensor::empty({xc.rows}, sd, dev), dx_local = Tensor::empty({0, C}, df.dtype(), dev);
    if (xc.rows > 0) dx_local = experts_->backward(ctx, dout_local, dp_local);
    experts_backward_dw(ctx);
    RowTransfer xt = send_from_experts(ex, ep, xc, dx_local, R),
                pt = send_from_experts(ex, ep, xc, dp_local.view({xc.rows, 1}), R);
    ctx.handover(Handover::BeforePreDispatchBackward);
    dx_perm = arrive_from_experts(ep, xt);
    dp_perm = arrive_from_experts(ep, pt).view({R});
  } else {
    ctx.handover(Handover::BeforeExpertsBackward);
    dx_perm = experts_->backward(ctx, dout_perm, dp_perm);
    experts_backward_dw(ctx);
    ctx.handover(Handover::BeforePreDispatchBackward);
  }
  Tensor dy = Tensor::empty({N, C}, df.dtype(), dev);
  ops::scatter_add_rows(ex, dy, dx_perm, s.plan.token_offsets, s.plan.token_rows);
  Tensor dprobs = Tensor::empty({N * K, 1}, sd, dev);
  ops::scatter_add_rows(ex, dprobs, dp_perm.view({R, 1}), s.plan.prob_offsets, s.plan.prob_rows);
  // Tensor parallelism: the experts' parts of the input and probability gradients are summed over the ranks before
  // the routers (whole on every rank) add theirs; without it the router's is added at once.
  if (!tp.on()) router_->backward_add(ctx, dprobs.view({N, K}), dy);
  Tensor dg;
  if (shared_) {
    if (s.shared_rerun) {
      RerunScope rerun(ctx);
      shared_->forward(ctx, s.shared_in, s.shared_gate, Tensor());
    }
    dg = Tensor::empty({N}, sd, dev);
    shared_->backward(ctx, df2, dg, &dy);
  }
  if (tp.on()) {
    tp_all_reduce(tp, dy);
    tp_all_reduce(tp, dprobs);
    router_->backward_add(ctx, dprobs.view({N, K}), dy);
  }
  if (gate_) {
    tp_all_reduce(tp, dg);
    gate_->backward_add(ctx, dg.view({N, 1}), dy);
  }
  s = Saved{};
  if (tp.seq()) return seq_part(ex, tp, dy.view(df.shape()));  // this rank's tokens of the whole gradient
  return dy.view(df.shape());
}

void MoeLayer::experts_backward_dw(StepContext& ctx) {
  ctx.handover(Handover::BeforeDispatchBackward);
  if (ctx.wgrad_in_slots) experts_->backward_dw(ctx);  // the mlp slot's delayed wgrad (docs/spec/ep_overlap.md §2)
}

void MoeLayer::backward_dw(StepContext& ctx) {
  if (shared_) shared_->backward_dw(ctx);
  experts_->backward_dw(ctx);
}

std::string MoeLayer::graph_blocker() const {
  if (opt_.experts.ep.on())
    return opt_.dispatch.pad_to_capacity
               ? "expert-parallel all-to-alls are not captured in CUDA graphs"
               : "expert parallelism exchanges each micro-batch's token counts through the host";
  if (opt_.router.balancing == LoadBalancing::GlobalAuxLoss && opt_.router.aux_coeff > 0)
    return "global_aux_loss reads each micro-batch's token counts on the host";
  return "";
}

void MoeLayer::finish_step(const MoeStats* reduced) {
  router_->finish_step(reduced != nullptr ? &reduced->tokens_per_expert : nullptr);
  if (gate_) gate_->finish_step();
}

}  // namespace hytra
