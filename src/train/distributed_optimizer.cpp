#include "train/distributed_optimizer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

DataParallelOptimizer::DataParallelOptimizer(ParamStore& params, const AdamWConfig& cfg, dist::Communicator* dp,
                                             bool sharded)
    : params_(params), dp_(dp), sharded_(sharded && dp != nullptr && dp->size() > 1) {
  const int64_t n = params.flat_master().numel();
  if (!sharded_) {
    adam_ = std::make_unique<AdamW>(params, cfg);
    load_ = adam_->state();
    return;
  }
  HYTRA_CHECK(params.flat_master().device() == Device::CPU && !params.has_separate_master(),
              "--use-distributed-optimizer: runs on CPUs (fp32) for now");
  part_ = (n + dp->size() - 1) / dp->size();
  const int64_t begin = std::min(n, dp->rank() * part_), end = std::min(n, begin + part_);
  adam_ = std::make_unique<AdamW>(params, cfg, begin, end);
  mine_ = Tensor::empty({part_}, DType::F32);
  whole_ = Tensor::zeros({part_ * dp->size()}, DType::F32);
}

OptimizerState& DataParallelOptimizer::load_target() {
  if (sharded_ && !load_m_.defined()) {
    const int64_t n = params_.flat_master().numel();
    load_m_ = Tensor::zeros({n}, DType::F32);
    load_v_ = Tensor::zeros({n}, DType::F32);
    load_ = {0, param_views(params_, load_m_), param_views(params_, load_v_)};
  }
  return load_;
}

void DataParallelOptimizer::gather(const Tensor& part, Tensor& all) {
  std::memcpy(mine_.raw(), part.raw(), part.nbytes());
  std::memset(static_cast<char*>(mine_.raw()) + part.nbytes(), 0, mine_.nbytes() - part.nbytes());
  dp_->all_gather(all, mine_);
}

double DataParallelOptimizer::reduce_gradients(Exec& ex) {
  Tensor& grads = params_.flat_grads();
  if (dp_ == nullptr) return grad_global_norm(ex, params_);
  if (!sharded_) {
    dp_->all_reduce_sum(grads);
    return grad_global_norm(ex, params_);
  }
  // Reduce-scatter (the buffer padded to ranks x S), the part written back where AdamW reads it.
  const int64_t begin = adam_->begin(), len = adam_->end() - begin;
  std::memcpy(whole_.raw(), grads.raw(), grads.nbytes());
  std::memset(static_cast<char*>(whole_.raw()) + grads.nbytes(), 0, whole_.nbytes() - grads.nbytes());
  dp_->reduce_scatter_sum(mine_, whole_);
  std::memcpy(grads.narrow(0, begin, len).raw(), mine_.raw(), size_t(len) * dtype_size(grads.dtype()));
  // The norm: each rank's sum of squares over its part, the partial sums added in rank order.
  Tensor sq = Tensor::zeros({1}, grads.dtype());
  if (len > 0) ops::sum_squares(ex, sq, grads.narrow(0, begin, len));
  dp_->all_reduce_sum(sq);
  return std::sqrt(sq.to_f64_vector()[0]);
}

void DataParallelOptimizer::step(Exec& ex, double lr, double grad_scale) {
  adam_->step(ex, lr, grad_scale);
  if (!sharded_) return;
  Tensor& master = params_.flat_master();
  gather(master.narrow(0, adam_->begin(), adam_->end() - adam_->begin()), whole_);
  std::memcpy(master.raw(), whole_.raw(), master.nbytes());
}

OptimizerState DataParallelOptimizer::state_for_save() {
  if (!sharded_) return adam_->state();
  Tensor m = Tensor::empty(whole_.shape(), DType::F32), v = Tensor::empty(whole_.shape(), DType::F32);
  gather(adam_->exp_avg_flat(), m);
  gather(adam_->exp_avg_sq_flat(), v);
  return {adam_->steps_taken(), param_views(params_, m), param_views(params_, v)};
}

void DataParallelOptimizer::loaded(bool filled) {
  if (filled) adam_->set_steps_taken(load_.step);
  if (!sharded_ || !load_m_.defined()) return;
  if (!filled) {
    load_ = {};
    load_m_ = Tensor();
    load_v_ = Tensor();
    return;
  }
  const int64_t begin = adam_->begin(), len = adam_->end() - begin;
  const size_t bytes = size_t(len) * dtype_size(load_m_.dtype());
  std::memcpy(adam_->exp_avg_flat().raw(), load_m_.narrow(0, begin, len).raw(), bytes);
  std::memcpy(adam_->exp_avg_sq_flat().raw(), load_v_.narrow(0, begin, len).raw(), bytes);
  load_ = {};  // the whole-buffer moments are not kept
  load_m_ = Tensor();
  load_v_ = Tensor();
}

}  // namespace hytra
