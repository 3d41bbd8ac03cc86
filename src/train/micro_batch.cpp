#include "train/micro_batch.h"

#include <algorithm>

#include "core/allocator.h"
#include "core/log.h"
#include "nn/module.h"
#include "ops/ops.h"

namespace hytra {
namespace {

void copy_into(Exec& ex, Tensor& dst, const Tensor& host) {
  HYTRA_ASSERT(dst.shape() == host.shape() && dst.dtype() == host.dtype(), "micro-batch buffer ", dst.desc(),
               " cannot take ", host.desc());
  memcpy_to_device_async(dst.raw(), host.raw(), host.nbytes(), ex.stream());
}

}  // namespace

Tensor loss_gradient(const Batch& b, int64_t num_micro, DType dtype) {
  const double denom = double(std::max<int64_t>(b.num_targets, 1));
  std::vector<double> d(size_t(b.labels.numel()));
  const int32_t* labels = b.labels.data<int32_t>();
  for (size_t i = 0; i < d.size(); ++i) d[i] = labels[i] >= 0 ? 1.0 / (denom * double(num_micro)) : 0.0;
  Tensor t = Tensor::empty(b.labels.shape(), dtype);
  t.copy_from_f64(d);
  return t;
}

MicroBatchRunner::MicroBatchRunner(Exec& ex, HybridModel& model, StepContext& ctx, const std::string& graphs_off,
                                   std::ostream& log)
    : ex_(ex), model_(model), ctx_(ctx) {
  if (ex.device() != Device::CUDA) return;
  const std::string blocker = model.graph_blocker();
  graphs_ = graphs_off.empty() && blocker.empty();
  if (graphs_)
    info_stream(log)
        << "hytra: CUDA graphs: each training micro-batch's forward and backward is captured once and replayed\n";
  else
    info_stream(log) << "hytra: CUDA graphs off: " << (graphs_off.empty() ? blocker : graphs_off) << "\n";
}

Tensor MicroBatchRunner::queue_model(const Tensor& ids, const Tensor& labels, const Tensor& loss_grad,
                                     int64_t num_micro, bool backward) {
  ctx_.clear();
  ctx_.grad_enabled = backward;
  ctx_.aux_loss_scale = 1.0 / double(num_micro);
  ctx_.loss_grad = loss_grad;
  Tensor losses = model_.forward(ctx_, ids, labels);  // (B,T)
  Tensor total = Tensor::empty({1}, losses.dtype(), losses.device());
  ops::sum(ex_, total, losses);
  if (backward) {
    model_.backward(ctx_, loss_grad);
    if (ctx_.delay_wgrad) model_.backward_dw(ctx_);
  }
  return total;
}

Tensor to_device_async(Exec& ex, const Tensor& host) {
  if (ex.device() == Device::CPU) return host;
  Tensor t = Tensor::empty(host.shape(), host.dtype(), ex.device());
  memcpy_to_device_async(t.raw(), host.raw(), host.nbytes(), ex.stream());
  return t;
}

double mean_micro_batch_loss(Exec& ex, std::vector<Tensor>& totals, std::vector<double>& denoms) {
  const size_t n = totals.size();
  if (n == 0) return 0.0;
  Tensor all = Tensor::empty({int64_t(n)}, totals[0].dtype(), totals[0].device());
  for (size_t i = 0; i < n; ++i) {
    Tensor slot = all.narrow(0, int64_t(i), 1);
    ops::copy(ex, slot, totals[i]);
  }
  const std::vector<double> sums = all.to_f64_vector();  // the one wait
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += sums[i] / denoms[i];
  totals.clear();
  denoms.clear();
  return mean / double(n);
}

void MicroBatchRunner::queue(const Batch& b, int64_t num_micro, bool backward, bool first_in_step, bool eager) {
  const Device dev = ex_.device();
  const double denom = double(std::max<int64_t>(b.num_targets, 1));
  denoms_.push_back(denom);
  const DType loss_dtype = stat_dtype(model_.params().flat_values().dtype());
  Tensor grad_host = backward ? loss_gradient(b, num_micro, loss_dtype) : Tensor();
  if (!graphs_ || !backward || eager) {
    totals_.push_back(queue_model(to_device_async(ex_, b.ids), to_device_async(ex_, b.labels),
                                  backward ? to_device_async(ex_, grad_host) : Tensor(), num_micro, backward));
    return;
  }
  if (!ids_.defined()) {
    ids_ = Tensor::empty(b.ids.shape(), b.ids.dtype(), dev);
    labels_ = Tensor::empty(b.labels.shape(), b.labels.dtype(), dev);
    loss_grad_ = Tensor::empty(b.labels.shape(), loss_dtype, dev);
  }
  // Stream-ordered: the copies land after the previous micro-batch has read these buffers.
  copy_into(ex_, ids_, b.ids);
  copy_into(ex_, labels_, b.labels);
  copy_into(ex_, loss_grad_, grad_host);
  if (!warmed_) {  // eager: builds what the capture must find ready (plans, algorithms, workspaces)
    warmed_ = true;
    totals_.push_back(queue_model(ids_, labels_, loss_grad_, num_micro, true));
    return;
  }
  Graph& g = graph_[first_in_step ? 0 : 1];
  if (!g.graph.captured()) {
    // The eager micro-batch's blocks would sit cached beside the graph's private ones: free them.
    ctx_.clear();
    if (!graph_[0].graph.captured() && !graph_[1].graph.captured()) cuda_allocator_release_cached();
    g.stale_before = stale_flags();
    g.graph.capture(ex_.stream(), kPool, [&] { g.total = queue_model(ids_, labels_, loss_grad_, num_micro, true); });
    g.stale_after = stale_flags();  // the capture ran the host side: its grad_beta() choices are baked in
  } else {
    HYTRA_ASSERT(stale_flags() == g.stale_before, "gradient zeroing state differs from the captured micro-batch's");
    set_stale_flags(g.stale_after);
  }
  g.graph.replay(ex_.stream());
  ++replays_;
  Tensor total = Tensor::empty({1}, g.total.dtype(), dev);  // the next replay overwrites g.total
  ops::copy(ex_, total, g.total);
  totals_.push_back(total);
}

double MicroBatchRunner::mean_loss() {
  const double mean = mean_micro_batch_loss(ex_, totals_, denoms_);
  ctx_.clear();  // the last micro-batch's saved tensors are not needed any more (e.g. after validation)
  return mean;
}

std::vector<bool> MicroBatchRunner::stale_flags() const {
  std::vector<bool> f;
  for (const Param* p : model_.params().all()) f.push_back(p->grad_stale);
  return f;
}

void MicroBatchRunner::set_stale_flags(const std::vector<bool>& flags) {
  size_t i = 0;
  for (Param* p : model_.params().all()) p->grad_stale = flags[i++];
}

}  // namespace hytra
