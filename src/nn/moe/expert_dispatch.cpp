#include "nn/moe/expert_dispatch.h"

#include "core/error.h"
#include "core/int_tensor.h"
#include "nn/linear.h"
#include "ops/ops.h"

namespace hytra {

CountsExchange::~CountsExchange() {
  cuda_host_free(pinned_);
  if (copied_ != nullptr) cuda_event_destroy(copied_);
}

void CountsExchange::start(Exec& ex, const ExpertParallel& ep, const Tensor& expert_offsets) {
  const int64_t E = expert_offsets.numel() - 1, P = ep.size;
  const Device dev = expert_offsets.device();
  gathered_ = Tensor::empty({P, E + 1}, DType::I32, dev);
  ep.comm->all_gather(gathered_, expert_offsets);
  const size_t n = size_t(P * (E + 1));
  if (dev == Device::CUDA) {
    if (pinned_count_ < n) {
      cuda_host_free(pinned_);
      pinned_ = static_cast<int32_t*>(cuda_host_alloc(n * sizeof(int32_t)));
      pinned_count_ = n;
    }
    if (copied_ == nullptr) copied_ = cuda_event_create();
    memcpy_to_host_async(pinned_, gathered_.raw(), n * sizeof(int32_t), ex.stream());
    cuda_event_record(copied_, ex.stream());
  }
  started_ = true;
}

namespace {
// Uploads host values to `dev` in ex's stream order (pageable memory is staged at once: no wait).
Tensor upload(Exec& ex, const std::vector<int32_t>& values, Device dev) {
  if (dev == Device::CPU) return int32_tensor(values, {int64_t(values.size())}, dev);
  Tensor t = Tensor::empty({int64_t(values.size())}, DType::I32, dev);
  memcpy_to_device_async(t.raw(), values.data(), values.size() * sizeof(int32_t), ex.stream());
  return t;
}

// The exchange from every rank's rows per expert: c(s, e) rows of rank s for global expert e (E experts); the
// index tensors uploaded to `dev` in ex's stream order.
template <class Count>
ExpertExchange exchange_of(Exec& ex, const ExpertParallel& ep, int64_t E, const Count& c, Device dev) {
  const int64_t P = ep.size, El = E / P;
  ExpertExchange xc;
  xc.send_rows.assign(size_t(P), 0);
  xc.recv_rows.assign(size_t(P), 0);
  for (int64_t r = 0; r < P; ++r)
    for (int64_t f = 0; f < El; ++f) {
      xc.send_rows[size_t(r)] += c(ep.rank, r * El + f);  // to rank r: its experts' rows
      xc.recv_rows[size_t(r)] += c(r, ep.rank * El + f);  // from rank r: its rows for this rank's experts
    }
  for (int64_t e = 0; e < E; ++e) xc.used += c(ep.rank, e);
  // Received rows: source-major, each source's rows by local expert. Local rows: expert-major, then source.
  std::vector<int64_t> source_start(size_t(P), 0);
  for (int64_t s = 1; s < P; ++s) source_start[size_t(s)] = source_start[size_t(s - 1)] + xc.recv_rows[size_t(s - 1)];
  std::vector<int32_t> to_local, to_received, local_offsets(size_t(El + 1), 0);
  for (int64_t e = 0; e < El; ++e) {
    for (int64_t s = 0; s < P; ++s) {
      int64_t at = source_start[size_t(s)];
      for (int64_t f = 0; f < e; ++f) at += c(s, ep.rank * El + f);
      for (int64_t i = 0; i < c(s, ep.rank * El + e); ++i) to_local.push_back(int32_t(at + i));
    }
    local_offsets[size_t(e + 1)] = int32_t(to_local.size());
  }
  xc.rows = int64_t(to_local.size());
  to_received.assign(to_local.size(), 0);
  for (size_t j = 0; j < to_local.size(); ++j) to_received[size_t(to_local[j])] = int32_t(j);
  xc.to_local = upload(ex, to_local, dev);
  xc.to_received = upload(ex, to_received, dev);
  xc.local_offsets = upload(ex, local_offsets, dev);
  return xc;
}
}  // namespace

ExpertExchange CountsExchange::finish(Exec& ex, const ExpertParallel& ep) {
  HYTRA_ASSERT(started_, "CountsExchange::finish without start");
  started_ = false;
  const int64_t E = gathered_.size(1) - 1;
  const Device dev = gathered_.device();
  const int32_t* off_all = nullptr;
  if (dev == Device::CUDA) {
    cuda_event_synchronize(copied_);  // the copy alone: what was queued after it keeps running
    off_all = pinned_;
  } else {
    off_all = gathered_.data<int32_t>();
  }
  auto c = [&](int64_t s, int64_t e) {  // rank s's rows for expert e
    return int64_t(off_all[s * (E + 1) + e + 1] - off_all[s * (E + 1) + e]);
  };
  ExpertExchange xc = exchange_of(ex, ep, E, c, dev);
  gathered_ = Tensor();
  return xc;
}

ExpertExchange uniform_exchange(Exec& ex, const ExpertParallel& ep, int64_t num_experts, int64_t per_expert) {
  return exchange_of(
      ex, ep, num_experts, [per_expert](int64_t, int64_t) { return per_expert; }, ex.device());
}

ExpertExchange plan_exchange(Exec& ex, const ExpertParallel& ep, const Tensor& expert_offsets) {
  CountsExchange counts;
  counts.start(ex, ep, expert_offsets);
  return counts.finish(ex, ep);
}

namespace {
// The elements of one row of `rows` (its dims after the first; a tensor of no rows has them too).
int64_t row_width(const Tensor& rows) {
  int64_t w = 1;
  for (int d = 1; d < rows.dim(); ++d) w *= rows.size(d);
  return w;
}
}  // namespace

RowTransfer send_to_experts(const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows) {
  const int64_t w = row_width(rows);
  RowTransfer t;
  t.sent = rows.view({rows.size(0), w}).narrow(0, 0, xc.used);
  t.received = Tensor::empty({xc.rows, w}, rows.dtype(), rows.device());
  t.ticket = ep.comm->all_to_all_v_async(t.received, t.sent, xc.send_rows, xc.recv_rows);
  return t;
}

Tensor arrive_at_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, RowTransfer& t) {
  ep.comm->wait(t.ticket);
  t.sent = Tensor();
  Tensor local = Tensor::empty(t.received.shape(), t.received.dtype(), t.received.device());
  if (xc.rows > 0) ops::gather_rows(ex, local, t.received, xc.to_local);
  t.received = Tensor();
  return local;
}

Tensor to_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows) {
  RowTransfer t = send_to_experts(ep, xc, rows);
  return arrive_at_experts(ex, ep, xc, t);
}

RowTransfer send_from_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows,
                              int64_t R) {
  const int64_t w = row_width(rows);
  RowTransfer t;
  t.sent = Tensor::empty({xc.rows, w}, rows.dtype(), rows.device());
  if (xc.rows > 0) ops::gather_rows(ex, t.sent, rows.view({xc.rows, w}), xc.to_received);
  t.received = zeros_on(ex, {R, w}, rows.dtype(), rows.device());
  Tensor back = t.received.narrow(0, 0, xc.used);
  t.ticket = ep.comm->all_to_all_v_async(back, t.sent, xc.recv_rows, xc.send_rows);
  return t;
}

Tensor arrive_from_experts(const ExpertParallel& ep, RowTransfer& t) {
  ep.comm->wait(t.ticket);
  t.sent = Tensor();
  Tensor out = t.received;
  t.received = Tensor();
  return out;
}

Tensor from_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows, int64_t R) {
  RowTransfer t = send_from_experts(ex, ep, xc, rows, R);
  return arrive_from_experts(ep, t);
}

}  // namespace hytra
