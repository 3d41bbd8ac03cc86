#include "train/pipeline_runner.h"

#include "core/error.h"
#include "ops/ops.h"
#include "train/micro_batch.h"
#include "train/pipeline_schedule.h"

namespace hytra {

PipelineRunner::PipelineRunner(Exec& ex, HybridModel& model, dist::Communicator& pp, const StepContext& settings)
    : ex_(ex), model_(model), pp_(pp), settings_(settings), first_(model.first_stage()), last_(model.last_stage()) {}

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

Tensor PipelineRunner::forward(int64_t slot, const Batch& b, const Tensor& input, int64_t num_micro, bool train) {
  if (int64_t(ctx_.size()) <= slot) ctx_.resize(size_t(slot + 1));
  auto& c = ctx_[size_t(slot)];
  if (!c) c = std::make_unique<StepContext>(ex_);
  c->clear();
  c->delay_wgrad = settings_.delay_wgrad;
  c->param_hooks = settings_.param_hooks;
  c->grad_enabled = train;
  c->aux_loss_scale = 1.0 / double(num_micro);
  const Device dev = ex_.device();
  const DType loss_dtype = stat_dtype(model_.params().flat_values().dtype());
  c->loss_grad = train && last_ ? loss_gradient(b, num_micro, loss_dtype).to(dev) : Tensor();
  Tensor out = model_.forward(*c, b.ids.to(dev), b.labels.to(dev), input);
  if (!last_) return out;
  Tensor total = Tensor::empty({1}, out.dtype(), out.device());
  ops::sum(ex_, total, out);
  totals_.push_back(total);
  denoms_.push_back(double(std::max<int64_t>(b.num_targets, 1)));
  return Tensor();
}

Tensor PipelineRunner::backward(int64_t slot, const Tensor& output_grad) {
  StepContext& c = *ctx_[size_t(slot)];
  Tensor input_grad = model_.backward(c, last_ ? c.loss_grad : output_grad);
  if (c.delay_wgrad) model_.backward_dw(c);
  c.clear();  // this micro-batch's saved tensors are done with
  return input_grad;
}

void PipelineRunner::train_step(const std::vector<Batch>& batches, int64_t num_micro,
                                const std::function<void(bool last)>& before_backward) {
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
  for (size_t m = 0; m < batches.size(); ++m) {
    send_forward(forward(0, batches[m], recv_forward(batches[m]), 1, false));
    ctx_[0]->clear();
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
