#include "train/pipeline_runner.h"

#include <utility>

#include "core/error.h"
#include "ops/ops.h"
#include "train/combined_schedule.h"
#include "train/micro_batch.h"
#include "train/pipeline_schedule.h"

namespace hytra {

PipelineRunner::PipelineRunner(Exec& ex, std::vector<HybridModel*> chunks, dist::Communicator& pp,
                               const StepContext& settings, bool ep_overlap, OverlapTimeline* timeline)
    : ex_(ex),
      chunks_(std::move(chunks)),
      model_(*chunks_.at(0)),
      pp_(pp),
      settings_(settings),
      ep_overlap_(ep_overlap),
      timeline_(timeline),
      first_(model_.first_stage()),
      last_(chunks_.back()->last_stage()) {}

Tensor PipelineRunner::hidden_buffer(const Batch& b) const {
  const Tensor& values = model_.params().flat_values();
  return Tensor::empty(model_.stage_boundary_shape(b.ids.size(0), b.ids.size(1)), values.dtype(), values.device());
}

Tensor PipelineRunner::recv_forward(const Batch& b) {
  if (first_) return Tensor();
  Tensor in = hidden_buffer(b);
  pp_.recv(in, pp_.rank() - 1);
  return in;
}

void PipelineRunner::send_forward(const Tensor& out) {
  if (!last_) pp_.send(out, pp_.rank() + 1);
}

Tensor PipelineRunner::send_forward_recv_backward(const Tensor& out, const Batch& b) {
  if (last_) return Tensor();
  Tensor grad = hidden_buffer(b);
  pp_.send_recv(out, pp_.rank() + 1, grad, pp_.rank() + 1);
  return grad;
}

Tensor PipelineRunner::recv_backward(const Batch& b) {
  if (last_) return Tensor();
  Tensor grad = hidden_buffer(b);
  pp_.recv(grad, pp_.rank() + 1);
  return grad;
}

void PipelineRunner::send_backward(const Tensor& grad) {
  if (!first_) pp_.send(grad, pp_.rank() - 1);
}

Tensor PipelineRunner::send_backward_recv_forward(const Tensor& grad, const Batch& b) {
  if (first_) return Tensor();
  Tensor in = hidden_buffer(b);
  pp_.send_recv(grad, pp_.rank() - 1, in, pp_.rank() - 1);
  return in;
}

StepContext& PipelineRunner::context(int64_t slot) {
  if (int64_t(ctx_.size()) <= slot) ctx_.resize(size_t(slot + 1));
  auto& c = ctx_[size_t(slot)];
  if (!c) c = std::make_unique<StepContext>(ex_);
  return *c;
}

Tensor PipelineRunner::forward(int64_t slot, const Batch& b, const Tensor& input, int64_t num_micro, bool train,
                               size_t chunk) {
  HybridModel& model = *chunks_[chunk];
  const bool last = model.last_stage();
  StepContext* c = &context(slot);
  c->clear();
  c->delay_wgrad = settings_.delay_wgrad;
  c->wgrad_in_slots = ep_overlap_;
  c->param_hooks = settings_.param_hooks;
  c->grad_enabled = train;
  c->aux_loss_scale = 1.0 / double(num_micro);
  const Device dev = ex_.device();
  const DType loss_dtype = stat_dtype(model_.params().flat_values().dtype());
  c->loss_grad = train && last ? loss_gradient(b, num_micro, loss_dtype).to(dev) : Tensor();
  Tensor out = model.forward(*c, b.ids.to(dev), b.labels.to(dev), input);
  if (!last) return out;
  Tensor total = Tensor::empty({1}, out.dtype(), out.device());
  ops::sum(ex_, total, out);
  totals_.push_back(total);
  denoms_.push_back(double(std::max<int64_t>(b.num_targets, 1)));
  return Tensor();
}

Tensor PipelineRunner::backward(int64_t slot, const Tensor& output_grad, size_t chunk) {
  HybridModel& model = *chunks_[chunk];
  StepContext& c = *ctx_[size_t(slot)];
  Tensor input_grad = model.backward(c, model.last_stage() ? c.loss_grad : output_grad);
  if (c.delay_wgrad) model.backward_dw(c);
  c.clear();  // this micro-batch's saved tensors are done with
  return input_grad;
}

void PipelineRunner::train_step(const std::vector<Batch>& batches, int64_t num_micro,
                                const std::function<void(bool last)>& before_backward) {
  if (chunks_.size() > 1) return train_interleaved(batches, num_micro, before_backward);
  const int64_t M = int64_t(batches.size());
  const int64_t warmup = pipeline_warmup(pp_.size(), pp_.rank(), M), steady = M - warmup;
  auto run_backward = [&](int64_t m, const Tensor& output_grad) {
    before_backward(m == M - 1);
    return backward(m, output_grad);
  };
  for (int64_t m = 0; m < warmup; ++m)
    send_forward(forward(m, batches[size_t(m)], recv_forward(batches[size_t(m)]), num_micro, true));
  Tensor input = steady > 0 ? recv_forward(batches[size_t(warmup)]) : Tensor();
  for (int64_t i = 0; i < steady; ++i) {
    const int64_t m = warmup + i;  // the forward's micro-batch; the backward's is i
    Tensor out = forward(m, batches[size_t(m)], input, num_micro, true);
    Tensor output_grad = send_forward_recv_backward(out, batches[size_t(i)]);
    Tensor input_grad = run_backward(i, output_grad);
    if (i == steady - 1) {
      send_backward(input_grad);
      input = Tensor();
    } else {
      input = send_backward_recv_forward(input_grad, batches[size_t(m + 1)]);
    }
  }
  for (int64_t m = steady; m < M; ++m) send_backward(run_backward(m, recv_backward(batches[size_t(m)])));
}

void PipelineRunner::evaluate(const std::vector<Batch>& batches) {
  if (chunks_.size() > 1) return evaluate_interleaved(batches);
  for (size_t m = 0; m < batches.size(); ++m) {
    send_forward(forward(0, batches[m], recv_forward(batches[m]), 1, false));
    ctx_[0]->clear();
  }
}

namespace {
constexpr int kForwardTag = 1, kBackwardTag = 2;  // the two streams of messages between neighbours
}  // namespace

// The interleaved schedule's transfers (Megatron's forward_backward_pipelining_with_interleaving): every step one
// exchange, its sends and receives in the same order on every rank (forward stream, then backward stream).
class InterleavedTransfers {
 public:
  InterleavedTransfers(dist::Communicator& pp, const std::vector<HybridModel*>& chunks,
                       const std::vector<Batch>& batches, std::function<Tensor(const Batch&)> buffer)
      : pp_(pp),
        chunks_(chunks),
        batches_(batches),
        buffer_(std::move(buffer)),
        total_(int64_t(batches.size() * chunks.size())),
        inputs_(size_t(total_)),
        grads_(size_t(total_)) {}
  PipelineAction forward(int64_t k) const { return interleaved_action(pp_.size(), int64_t(chunks_.size()), k, true); }
  PipelineAction backward(int64_t k) const { return interleaved_action(pp_.size(), int64_t(chunks_.size()), k, false); }
  Tensor take_input(int64_t k) { return std::exchange(inputs_[size_t(k)], Tensor()); }
  Tensor take_grad(int64_t k) { return std::exchange(grads_[size_t(k)], Tensor()); }
  // Sends `out` (undefined: nothing) forward and `dgrad` back; receives the input of virtual forward `next_fwd` and
  // the output gradient of virtual backward `next_bwd` where their chunks are not the pipeline's ends (an index
  // outside [0, total): none).
  void step(const Tensor& out, const Tensor& dgrad, int64_t next_fwd, int64_t next_bwd) {
    const int P = pp_.size(), r = pp_.rank(), next = (r + 1) % P, prev = (r + P - 1) % P;
    std::vector<dist::Communicator::Send> sends;
    std::vector<dist::Communicator::Recv> recvs;
    if (out.defined()) sends.push_back({&out, next, kForwardTag});
    if (dgrad.defined()) sends.push_back({&dgrad, prev, kBackwardTag});
    if (next_fwd >= 0 && next_fwd < total_) {
      const PipelineAction a = forward(next_fwd);
      if (!chunks_[size_t(a.chunk)]->first_stage()) {
        inputs_[size_t(next_fwd)] = buffer_(batches_[size_t(a.micro)]);
        recvs.push_back({&inputs_[size_t(next_fwd)], prev, kForwardTag});
      }
    }
    if (next_bwd >= 0 && next_bwd < total_) {
      const PipelineAction a = backward(next_bwd);
      if (!chunks_[size_t(a.chunk)]->last_stage()) {
        grads_[size_t(next_bwd)] = buffer_(batches_[size_t(a.micro)]);
        recvs.push_back({&grads_[size_t(next_bwd)], next, kBackwardTag});
      }
    }
    pp_.exchange(sends, recvs);
  }
  int64_t total() const { return total_; }

 private:
  dist::Communicator& pp_;
  const std::vector<HybridModel*>& chunks_;
  const std::vector<Batch>& batches_;
  std::function<Tensor(const Batch&)> buffer_;
  int64_t total_;
  std::vector<Tensor> inputs_, grads_;  // by virtual micro-batch, in the forward / backward order
};

void PipelineRunner::train_interleaved(const std::vector<Batch>& batches, int64_t num_micro,
                                       const std::function<void(bool last)>& before_backward) {
  const int64_t M = int64_t(batches.size()), V = int64_t(chunks_.size());
  pipeline_schedule(pp_.size(), pp_.rank(), M, V);  // the counts' named errors
  InterleavedTransfers t(pp_, chunks_, batches, [this](const Batch& b) { return hidden_buffer(b); });
  const int64_t total = t.total(), warmup = interleaved_warmup(pp_.size(), pp_.rank(), M, V, ep_overlap_),
                steady = total - warmup;
  auto slot = [M](const PipelineAction& a) { return a.chunk * M + a.micro; };
  auto run_forward = [&](int64_t k) {
    const PipelineAction a = t.forward(k);
    return forward(slot(a), batches[size_t(a.micro)], t.take_input(k), num_micro, true, size_t(a.chunk));
  };
  auto run_backward = [&](int64_t k) {
    const PipelineAction a = t.backward(k);
    return backward(slot(a), t.take_grad(k), size_t(a.chunk));
  };
  // Virtual forward kf and virtual backward kb (-1: none): plainly one after the other, or as a combined 1F1B pair.
  auto run_step = [&](int64_t kf, int64_t kb, Tensor& out, Tensor& dgrad) {
    if (kb >= 0) before_backward(kb == total - 1);
    if (!ep_overlap_) {
      if (kf >= 0) out = run_forward(kf);
      if (kb >= 0) dgrad = run_backward(kb);
      return;
    }
    StepContext& fc = context(kf >= 0 ? slot(t.forward(kf)) : 0);
    StepContext& bc = context(kb >= 0 ? slot(t.backward(kb)) : 0);
    run_combined_pair(timeline_, fc,
                      kf >= 0 ? std::function<void()>([&] { out = run_forward(kf); }) : std::function<void()>(), bc,
                      kb >= 0 ? std::function<void()>([&] { dgrad = run_backward(kb); }) : std::function<void()>());
  };
  if (timeline_ != nullptr) timeline_->begin_step();
  t.step(Tensor(), Tensor(), 0, -1);
  for (int64_t k = 0; k < warmup; ++k) {  // the last warm-up step also receives the first backward's gradient
    Tensor out, unused;
    run_step(k, -1, out, unused);
    t.step(out, Tensor(), k + 1, k == warmup - 1 && steady > 0 ? 0 : -1);
  }
  if (steady == 0) t.step(Tensor(), Tensor(), -1, 0);
  for (int64_t i = 0; i < steady; ++i) {
    Tensor out, dgrad;
    run_step(warmup + i, i, out, dgrad);
    t.step(out, dgrad, warmup + i + 1, i + 1);
  }
  for (int64_t k = steady; k < total; ++k) {
    Tensor unused, dgrad;
    run_step(-1, k, unused, dgrad);
    t.step(Tensor(), dgrad, -1, k + 1);
  }
  if (timeline_ != nullptr) timeline_->end_step();
}

void PipelineRunner::evaluate_interleaved(const std::vector<Batch>& batches) {
  const int64_t M = int64_t(batches.size());
  InterleavedTransfers t(pp_, chunks_, batches, [this](const Batch& b) { return hidden_buffer(b); });
  t.step(Tensor(), Tensor(), 0, -1);
  for (int64_t k = 0; k < t.total(); ++k) {
    const PipelineAction a = t.forward(k);
    const Tensor out =
        forward(a.chunk * M + a.micro, batches[size_t(a.micro)], t.take_input(k), 1, false, size_t(a.chunk));
    ctx_[size_t(a.chunk * M + a.micro)]->clear();
    t.step(out, Tensor(), k + 1, -1);
  }
}

double PipelineRunner::mean_loss() {
  // The last stage's mean over its micro-batches, then broadcast over the pipeline (through the device for NCCL).
  double mean = 0;
  if (last_ && !totals_.empty()) {
    for (size_t i = 0; i < totals_.size(); ++i) mean += totals_[i].to_f64_vector()[0] / denoms_[i];
    mean /= double(totals_.size());
  }
  totals_.clear();
  denoms_.clear();
  Tensor t = Tensor::empty({1}, DType::F64);
  t.copy_from_f64({mean});
  Tensor d = t.to(pp_.device());
  pp_.broadcast(d, pp_.size() - 1);
  return d.to(Device::CPU).to_f64_vector()[0];
}

}  // namespace hytra
