#include "nn/moe/router.h"

#include <cmath>

#include "core/error.h"
#include "core/int_tensor.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace hytra {

TopKRouter::TopKRouter(const RouterOptions& o, const std::string& prefix, ParamStore& store) : opt_(o) {
  w_ = &store.create(prefix + o.weight_key, {o.num_experts, o.hidden}, InitKind::Normal, o.init_std, false);
  if (o.bias) {
    linear_bias_ = &store.create(prefix + "mlp.router.bias", {o.num_experts}, InitKind::Zeros, 0.0, true);
    linear_bias_->master_in_forward = true;
  }
  if (o.expert_bias) {
    bias_ = &store.create(prefix + "mlp.router.expert_bias", {o.num_experts}, InitKind::Zeros, 0.0, true);
    bias_->master_in_forward = true;
  }
  stats_.tokens_per_expert.assign(size_t(o.num_experts), 0);
  global_counts_.assign(size_t(o.num_experts), 0.0);
}

namespace {
double scalar(const Tensor& t) { return t.to_f64_vector()[0]; }

// t rounded to dtype `low` and back (Megatron's values in the activation dtype), in place.
void round_through(Exec& ex, Tensor& t, DType low) {
  Tensor tmp = Tensor::empty(t.shape(), low, t.device());
  ops::copy(ex, tmp, t);
  ops::copy(ex, t, tmp);
}
}  // namespace

TopKRouter::Routing TopKRouter::forward(StepContext& ctx, const Tensor& x, int64_t num_seqs) {
  Exec& ex = ctx.ex();
  const int64_t C = opt_.hidden, E = opt_.num_experts, K = opt_.topk, N = x.numel() / C;
  const DType sd = stat_dtype(x.dtype());
  const Device dev = x.device();
  Saved& s = ctx.saved<Saved>(this);
  s.x = x.view({N, C});
  s.logits = Tensor::empty({N, E}, sd, dev);
  const bool low = x.dtype() != sd && !opt_.fp32_logits;  // Megatron's logits in the activation dtype
  ops::gemm(ex, s.logits, s.x, w_->value, false, true, 1.0f, 0.0f);
  if (linear_bias_)
    ops::gemm(ex, s.logits, ones_column(ex, N, sd, dev), linear_bias_->master.view({1, E}), false, false, 1.0f, 1.0f);
  if (low) round_through(ex, s.logits, x.dtype());
  Routing r;
  r.probs = Tensor::empty({N, K}, sd, dev);
  r.top = Tensor::empty({N, K}, DType::I32, dev);
  Tensor no_bias;
  ops::moe_router_fwd(ex, r.probs, r.top, s.logits, bias_ ? bias_->master : no_bias, K, opt_.score, opt_.pre_softmax,
                      opt_.num_groups, opt_.group_topk, opt_.scaling);
  if (low) round_through(ex, r.probs, x.dtype());
  s.top = r.top;
  s.daux = Tensor();
  if (!ctx.grad_enabled) return r;

  ensure_accumulators(dev, sd);
  const bool aux = opt_.balancing != LoadBalancing::None && opt_.aux_coeff > 0;
  if (aux || opt_.z_coeff > 0) s.daux = zeros_on(ex, {N, E}, sd, dev);
  if (aux) {
    Tensor loss = Tensor::empty({1}, sd, dev);
    Tensor none;
    if (opt_.balancing == LoadBalancing::GlobalAuxLoss) {
      // Counts of this micro-batch first, then the loss against their running mean over the step.
      Tensor counts = Tensor::empty({1, E}, sd, dev);
      ops::moe_aux_loss(ex, loss, counts, none, s.logits, none, K, opt_.score, 1, opt_.aux_coeff, 0.0);
      // A recompute reruns the same micro-batch after its counts were added: the same mean.
      const std::vector<double> c = counts.to_f64_vector();
      std::vector<double> mean(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        if (!ctx.recomputing) global_counts_[size_t(e)] += c[size_t(e)];
        mean[size_t(e)] = global_counts_[size_t(e)] / double(global_micro_ + (ctx.recomputing ? 0 : 1));
      }
      Tensor host = Tensor::empty({1, E}, sd);
      host.copy_from_f64(mean);
      ops::moe_aux_loss(ex, loss, counts, s.daux, s.logits, host.to(dev), K, opt_.score, 1, opt_.aux_coeff,
                        ctx.aux_loss_scale);
    } else {
      const int64_t S = opt_.balancing == LoadBalancing::SeqAuxLoss ? num_seqs : 1;
      Tensor counts = Tensor::empty({S, E}, sd, dev);
      ops::moe_aux_loss(ex, loss, counts, s.daux, s.logits, none, K, opt_.score, S, opt_.aux_coeff, ctx.aux_loss_scale);
    }
    if (!ctx.recomputing) ops::axpy(ex, acc_.aux, loss, 1.0);
  }
  if (opt_.z_coeff > 0) {
    Tensor loss = Tensor::empty({1}, sd, dev);
    ops::moe_z_loss(ex, loss, s.daux, s.logits, opt_.z_coeff, ctx.aux_loss_scale);
    if (!ctx.recomputing) ops::axpy(ex, acc_.z, loss, 1.0);
  }
  if (!ctx.recomputing) {
    ops::axpy(ex, acc_.micro, acc_.one, 1.0);
    ++global_micro_;
  }
  return r;
}

void TopKRouter::backward_add(StepContext& ctx, const Tensor& dprobs, Tensor& dx) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const DType xt = s.x.dtype();
  Tensor dlogits = Tensor::empty(s.logits.shape(), s.logits.dtype(), s.logits.device());  // (N,E)
  ops::moe_router_bwd(ex, dlogits, dprobs, s.logits, s.top, opt_.score, opt_.pre_softmax, opt_.scaling);
  if (s.daux.defined()) ops::axpy(ex, dlogits, s.daux, 1.0);
  if (linear_bias_) {
    const int64_t N = dlogits.size(0);
    Tensor db = linear_bias_->grad.view({opt_.num_experts, 1});
    ops::gemm(ex, db, dlogits, ones_column(ex, N, dlogits.dtype(), dlogits.device()), true, false, 1.0f, 1.0f);
  }
  if (xt == dlogits.dtype()) {
    ops::gemm(ex, dx, dlogits, w_->value, false, false, 1.0f, 1.0f);
    ops::gemm(ex, w_->grad, dlogits, s.x, true, false, 1.0f, 1.0f);
  } else if (opt_.fp32_logits) {  // --moe-router-dtype fp32: both gradient GEMMs in fp32
    Tensor x32 = Tensor::empty(s.x.shape(), dlogits.dtype(), s.x.device());
    Tensor w32 = Tensor::empty(w_->value.shape(), dlogits.dtype(), s.x.device());
    ops::copy(ex, x32, s.x);
    ops::copy(ex, w32, w_->value);
    Tensor dx32 = Tensor::empty(s.x.shape(), dlogits.dtype(), s.x.device());
    ops::gemm(ex, dx32, dlogits, w32, false, false, 1.0f, 0.0f);
    ops::axpy(ex, dx, dx32, 1.0);
    ops::gemm(ex, w_->grad, dlogits, x32, true, false, 1.0f, 1.0f);
  } else {  // the gradient in the activation dtype, as Megatron's bf16 router
    Tensor dl = Tensor::empty(dlogits.shape(), xt, dlogits.device());
    ops::copy(ex, dl, dlogits);
    ops::gemm(ex, dx, dl, w_->value, false, false, 1.0f, 1.0f);
    ops::gemm(ex, w_->grad, dl, s.x, true, false, 1.0f, 1.0f);
  }
  s = Saved{};
}

void TopKRouter::ensure_accumulators(Device device, DType sd) {
  if (acc_.one.defined()) return;
  Exec& ex = Exec::for_device(device);
  acc_.tokens = zeros_on(ex, {opt_.num_experts}, DType::I32, device);
  acc_.aux = zeros_on(ex, {1}, sd, device);
  acc_.z = zeros_on(ex, {1}, sd, device);
  acc_.micro = zeros_on(ex, {1}, sd, device);
  acc_.one = Tensor::empty({1}, sd, device);
  ops::fill(ex, acc_.one, 1.0);
}

Tensor& TopKRouter::token_counter(Device device) {
  ensure_accumulators(device, stat_dtype(w_->value.dtype()));
  return acc_.tokens;
}

void TopKRouter::fold() const {
  if (!acc_.one.defined()) return;
  const std::vector<int32_t> tokens = int32_values(acc_.tokens);
  for (size_t e = 0; e < tokens.size(); ++e) stats_.tokens_per_expert[e] += tokens[e];
  stats_.aux_loss += scalar(acc_.aux);
  stats_.z_loss += scalar(acc_.z);
  stats_.micro_batches += int64_t(std::llround(scalar(acc_.micro)));
  Exec& ex = Exec::for_device(acc_.one.device());
  for (Tensor* t : {&acc_.tokens, &acc_.aux, &acc_.z, &acc_.micro}) ops::fill(ex, *t, 0.0);
}

const MoeStats& TopKRouter::stats() const {
  fold();
  return stats_;
}

void TopKRouter::finish_step(const std::vector<int64_t>* counts) {
  fold();
  if (bias_) {
    // Aux-loss-free balancing (docs/spec/moe.md §1): bias += rate * sign(mean count - count).
    const std::vector<int64_t>& c = counts != nullptr ? *counts : stats_.tokens_per_expert;
    HYTRA_ASSERT(c.size() == size_t(opt_.num_experts), "router: one routed-token count an expert expected");
    double mean = 0;
    for (int64_t v : c) mean += double(v);
    mean /= double(c.size());
    std::vector<double> b = bias_->master.to_f64_vector();
    for (size_t e = 0; e < b.size(); ++e) {
      const double d = mean - double(c[e]);
      b[e] += opt_.bias_update_rate * double((d > 0) - (d < 0));
    }
    Tensor host = Tensor::empty(bias_->shape, bias_->master.dtype());
    host.copy_from_f64(b);
    Exec& ex = Exec::for_device(bias_->master.device());
    ops::copy(ex, bias_->master, host.to(bias_->master.device()));
    if (bias_->value.raw() != bias_->master.raw()) ops::copy(ex, bias_->value, bias_->master);
  }
  const int64_t layer = stats_.layer_number;
  stats_ = MoeStats{};
  global_micro_ = 0;
  stats_.layer_number = layer;
  stats_.tokens_per_expert.assign(size_t(opt_.num_experts), 0);
  global_counts_.assign(size_t(opt_.num_experts), 0.0);
}

}  // namespace hytra
