#include "train/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

namespace {
// The parts of `r` outside every range of `cut` (sorted, disjoint): as many as `cut` has ranges plus one, some
// maybe empty, so every rank has the same count.
std::vector<FlatRange> outside(const FlatRange& r, const std::vector<FlatRange>& cut) {
  std::vector<FlatRange> out;
  int64_t at = r.begin;
  for (const FlatRange& c : cut) {
    const int64_t end = std::clamp(c.begin, at, r.end);
    out.push_back({at, end});
    at = std::clamp(c.end, at, r.end);
  }
  out.push_back({at, r.end});
  return out;
}

// Runs of the parameters `pick` selects, each with the zero padding up to the next parameter.
template <class Pick>
std::vector<FlatRange> runs_of(ParamStore& params, Pick pick) {
  const std::vector<Param*>& all = params.all();
  std::vector<FlatRange> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!pick(i, *all[i])) continue;
    const int64_t end = i + 1 < all.size() ? all[i + 1]->offset : params.flat_grads().numel();
    if (!out.empty() && out.back().end == all[i]->offset)
      out.back().end = end;
    else
      out.push_back({all[i]->offset, end});
  }
  return out;
}
}  // namespace

int64_t DataParallelOptimizer::param_align(int ranks, bool sharded) {
  return sharded && ranks > 1 ? std::lcm(ParamStore::kAlign, int64_t(ranks)) : ParamStore::kAlign;
}

DataParallelOptimizer::DataParallelOptimizer(ParamStore& params, const AdamWConfig& cfg, dist::Communicator* dp,
                                             const DataParallelOptions& opt)
    : params_(params),
      dp_(dp),
      ep_(opt.expert_ep),
      edp_(opt.expert_dp),
      sharded_(opt.sharded && dp != nullptr && dp->size() > 1),
      overlap_grad_(opt.overlap_grad_reduce),
      overlap_param_(opt.overlap_param_gather && sharded_) {
  // Megatron: one bucket unless the reduction overlaps the backward; there 40M elements (1M a rank at least)
  // unless --ddp-bucket-size says otherwise.
  const int ranks = dp != nullptr ? dp->size() : 1;
  const int64_t bucket = !overlap_grad_         ? 0
                         : opt.bucket_elems > 0 ? opt.bucket_elems
                                                : std::max<int64_t>(40000000, 1000000 * ranks);
  buckets_ = plan_grad_buckets(params, bucket);
  bucket_of_.assign(params.all().size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i = buckets_[b].first_param; i < buckets_[b].end_param; ++i) bucket_of_[i] = b;
    HYTRA_ASSERT(!buckets_[b].expert || edp_ != nullptr, "an expert-parallel bucket without its group");
    HYTRA_ASSERT(!sharded_ || buckets_[b].range.size() % ranks == 0, "a data-parallel bucket of ",
                 buckets_[b].range.size(), " elements does not divide into ", ranks,
                 " parts (ParamStore::finalize's align)");
  }
  if (!sharded_) {
    adam_ = std::make_unique<AdamW>(params, cfg);
    load_ = adam_->state();
  } else {
    std::vector<FlatRange> parts;
    for (const GradBucket& b : buckets_) parts.push_back(part_of(b));
    adam_ = std::make_unique<AdamW>(params, cfg, parts);
  }
  for (const GradBucket& b : buckets_) {
    bool master = false;
    for (size_t i = b.first_param; i < b.end_param; ++i) master = master || params.all()[i]->master_in_forward;
    gather_master_.push_back(master && params.has_separate_master());
  }
  gather_.assign(buckets_.size(), -1);
  gathered_ = buckets_.size();
  recount();
}

FlatRange DataParallelOptimizer::part_of(const GradBucket& b) const {
  const dist::Communicator* c = comm_of(b);
  const int64_t len = b.range.size() / c->size(), begin = b.range.begin + c->rank() * len;
  return {begin, begin + len};
}

std::string DataParallelOptimizer::describe() const {
  return str(
      "gradients ", sharded_ ? "reduce-scattered" : "all-reduced", " in ", buckets_.size(),
      buckets_.size() == 1 ? " bucket" : " buckets", overlap_grad_ ? " as the backward completes them" : "",
      sharded_ ? (overlap_param_ ? ", parameters gathered during the next forward" : ", parameters gathered") : "");
}

bool DataParallelOptimizer::communicates_in(bool first_in_step, bool last_in_step) const {
  return dp_ != nullptr && ((overlap_grad_ && last_in_step) || (overlap_param_ && first_in_step));
}

void DataParallelOptimizer::reduce(size_t b) {
  reduced_[b] = true;
  const GradBucket& bucket = buckets_[b];
  params_.finish_grads(bucket.first_param, bucket.end_param);  // gradients no write reached count as zero
  Tensor whole = params_.flat_grads().narrow(0, bucket.range.begin, bucket.range.size());
  dist::Communicator* c = comm_of(bucket);  // an expert bucket: over the ranks holding the same experts
  dist::Communicator::Ticket& last = bucket.expert ? last_expert_reduce_ : last_reduce_;
  if (!sharded_) {
    last = c->all_reduce_sum_async(whole);
    return;
  }
  const FlatRange part = part_of(bucket);
  Tensor mine = params_.flat_grads().narrow(0, part.begin, part.size());  // in place
  last = c->reduce_scatter_sum_async(mine, whole);
}

void DataParallelOptimizer::grads_ready(size_t first, size_t end) {
  if (!armed_) return;
  if (param_ready_.empty()) {  // the step's first report
    param_ready_.assign(params_.all().size(), false);
    reduced_.assign(buckets_.size(), false);
    unready_.clear();
    for (const GradBucket& b : buckets_) unready_.push_back(int64_t(b.end_param - b.first_param));
  }
  for (size_t i = first; i < end; ++i) {
    if (param_ready_[i]) continue;
    param_ready_[i] = true;
    const size_t b = bucket_of_[i];
    if (--unready_[b] == 0 && b != deferred_) reduce(b);
  }
}

void DataParallelOptimizer::set_pipeline(dist::Communicator* pp, const Param* not_counted, const Param* shared) {
  pp_ = pp;
  if (shared != nullptr) {
    const auto& all = params_.all();
    const auto it = std::find(all.begin(), all.end(), shared);
    HYTRA_ASSERT(it != all.end(), "set_pipeline: the shared parameter is not in this store");
    deferred_ = bucket_of_[size_t(it - all.begin())];
  }
  if (not_counted) leave_out(not_counted);
  recount();
}

void DataParallelOptimizer::set_tensor_parallel(dist::Communicator* tp) {
  tp_ = tp;
  if (tp->rank() == 0) return;
  for (const Param* p : params_.all())
    if (!p->shard.split()) leave_out(p);
  recount();
}

void DataParallelOptimizer::leave_out(const Param* p) {
  const std::vector<Param*>& all = params_.all();
  if (counted_.empty()) counted_.assign(all.size(), true);
  counted_[size_t(std::find(all.begin(), all.end(), p) - all.begin())] = false;
}

void DataParallelOptimizer::recount() {
  auto counted = [this](size_t i) { return counted_.empty() || counted_[i]; };
  // Runs of uncounted parameters, each with the zero padding up to the next parameter: fewer ranges to sum.
  not_counted_ = runs_of(params_, [&](size_t i, const Param&) { return !counted(i); });
  // Expert parallelism: the counted experts' weights (a bias held whole on every tensor-parallel rank counts once).
  if (ep_ != nullptr)
    expert_ranges_ = runs_of(params_, [&](size_t i, const Param& p) { return p.expert_parallel && counted(i); });
}

double DataParallelOptimizer::reduce_gradients(Exec& ex) {
  if (dp_ != nullptr) {
    if (reduced_.empty()) reduced_.assign(buckets_.size(), false);
    for (size_t b = buckets_.size(); b-- > 0;)  // what the backward did not start, last bucket first
      if (!reduced_[b]) reduce(b);
    if (last_reduce_ >= 0) dp_->wait(last_reduce_);
    if (last_expert_reduce_ >= 0) edp_->wait(last_expert_reduce_);
    armed_ = false;
    param_ready_.clear();
    reduced_.clear();
  }
  if (tp_ != nullptr) {  // the parts of the gradients of parameters held whole on every tensor-parallel rank
    for (Param* p : params_.all())
      if (p->tp_partial_grad) tp_->all_reduce_sum(p->grad);
  }
  return std::sqrt(counted_total(ex, params_.flat_grads(), Statistic::SumOfSquares));
}

double DataParallelOptimizer::params_norm(Exec& ex) {
  return std::sqrt(counted_total(ex, params_.flat_master(), Statistic::SumOfSquares));
}

int64_t DataParallelOptimizer::grad_zeros(Exec& ex) {
  return int64_t(counted_total(ex, params_.flat_grads(), Statistic::Zeros));
}

double DataParallelOptimizer::counted_total(Exec& ex, const Tensor& flat, Statistic stat) {
  // Each range's statistic into one element (fp32 or fp64 sums of squares, int64 counts).
  const DType part_dtype = stat == Statistic::Zeros ? DType::I64 : flat.dtype() == DType::F64 ? DType::F64 : DType::F32;
  auto measure_all = [&](const std::vector<FlatRange>& ranges) {
    Tensor out = Tensor::zeros({std::max<int64_t>(1, int64_t(ranges.size()))}, part_dtype, flat.device());
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (ranges[i].size() == 0) continue;
      Tensor slot = out.narrow(0, int64_t(i), 1);
      const Tensor x = flat.narrow(0, ranges[i].begin, ranges[i].size());
      if (stat == Statistic::Zeros)
        ops::count_zeros(ex, slot, x);
      else
        ops::sum_squares(ex, slot, x);
    }
    return out;
  };
  auto host_sum = [](const Tensor& parts) {
    double total = 0;
    for (double v : parts.to_f64_vector()) total += v;
    return total;
  };
  auto group_sum = [](dist::Communicator* c, double v) {
    Tensor t = Tensor::empty({1}, DType::F64);
    t.copy_from_f64({v});
    Tensor d = t.to(c->device());
    c->all_reduce_sum(d);
    return d.to(Device::CPU).to_f64_vector()[0];
  };
  if (!sharded_ && pp_ == nullptr && tp_ == nullptr && ep_ == nullptr && stat == Statistic::SumOfSquares)
    return host_sum(measure_all({{0, flat.numel()}}));
  // Each rank's statistic over what it counts (sharded: its parts, summed over the ranks), then over those ranges
  // in order, then over the tensor-parallel ranks and the pipeline's stages. The experts of an expert-parallel
  // rank are summed apart, then over the expert-parallel group.
  // Replicated, an expert-parallel rank's experts are summed apart (below); sharded, the parts' sums over the
  // data-parallel group also sum the experts' over the ranks holding the others.
  const bool experts_apart = ep_ != nullptr && !sharded_;
  std::vector<FlatRange> padding;  // counting zeros: the zero padding between parameters, which is no gradient
  if (stat == Statistic::Zeros) {
    const std::vector<Param*>& all = params_.all();
    for (size_t i = 0; i < all.size(); ++i)
      padding.push_back(
          {all[i]->offset + all[i]->grad.numel(), i + 1 < all.size() ? all[i + 1]->offset : flat.numel()});
  }
  std::vector<FlatRange> experts_counted;
  for (const FlatRange& r : expert_ranges_) {
    const std::vector<FlatRange> pieces = outside(r, padding);
    experts_counted.insert(experts_counted.end(), pieces.begin(), pieces.end());
  }
  std::vector<FlatRange> cut = not_counted_;
  if (experts_apart) cut.insert(cut.end(), expert_ranges_.begin(), expert_ranges_.end());
  cut.insert(cut.end(), padding.begin(), padding.end());
  std::sort(cut.begin(), cut.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  std::vector<FlatRange> ranges;
  if (sharded_) {  // each part's pieces outside the uncounted elements (maybe empty): as many on every rank
    for (const GradBucket& b : buckets_) {
      const std::vector<FlatRange> pieces = outside(part_of(b), cut);
      ranges.insert(ranges.end(), pieces.begin(), pieces.end());
    }
  } else {
    ranges = outside({0, flat.numel()}, cut);
  }
  const double experts = experts_apart ? group_sum(ep_, host_sum(measure_all(experts_counted))) : 0.0;
  Tensor parts = measure_all(ranges);
  if (sharded_) {  // summed over the data-parallel group (counts as fp64: exact below 2^53)
    if (stat == Statistic::Zeros) {
      Tensor wide = Tensor::empty({parts.numel()}, DType::F64);
      wide.copy_from_f64(parts.to_f64_vector());
      parts = wide.to(dp_->device());
    }
    dp_->all_reduce_sum(parts);
  }
  double total = host_sum(parts) + experts;
  for (dist::Communicator* c : {tp_, pp_})
    if (c != nullptr) total = group_sum(c, total);
  return total;
}

void DataParallelOptimizer::step(Exec& ex, double lr, double grad_scale) {
  adam_->step(ex, lr, grad_scale);
  if (!sharded_) return;
  // Every rank's updated parts of the values (the master weights themselves in fp32 runs), in place.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Tensor& from = gather_master_[b] ? params_.flat_master() : params_.flat_values();
    const FlatRange part = part_of(buckets_[b]);
    Tensor whole = from.narrow(0, buckets_[b].range.begin, buckets_[b].range.size());
    gather_[b] = comm_of(buckets_[b])->all_gather_async(whole, from.narrow(0, part.begin, part.size()));
    if (!overlap_param_) {
      comm_of(buckets_[b])->wait(gather_[b]);
      gathered(b);
    }
  }
  gathered_ = overlap_param_ ? 0 : buckets_.size();
}

void DataParallelOptimizer::gathered(size_t b) {
  if (!gather_master_[b]) return;
  Tensor values = params_.flat_values().narrow(0, buckets_[b].range.begin, buckets_[b].range.size());
  ops::copy(Exec::for_device(values.device()), values,
            params_.flat_master().narrow(0, buckets_[b].range.begin, buckets_[b].range.size()));
}

void DataParallelOptimizer::params_needed(size_t end) {
  if (gathered_ == buckets_.size() || end == 0) return;
  const size_t need = bucket_of_[end - 1] + 1;  // buckets [0, need) hold the parameters before end
  if (need <= gathered_) return;
  for (; gathered_ < need; ++gathered_) {
    comm_of(buckets_[gathered_])->wait(gather_[gathered_]);
    gathered(gathered_);
  }
}

void DataParallelOptimizer::finish_gather() { params_needed(params_.all().size()); }

void DataParallelOptimizer::gather_parts(Tensor& whole, const Tensor& compact) {
  int64_t at = 0;
  for (const GradBucket& b : buckets_) {
    const int64_t len = part_of(b).size();
    Tensor out = whole.narrow(0, b.range.begin, b.range.size());
    comm_of(b)->all_gather(out, compact.narrow(0, at, len));
    at += len;
  }
}

OptimizerState DataParallelOptimizer::state_for_save() {
  finish_gather();
  if (!sharded_) return adam_->state();
  Tensor& master = params_.flat_master();
  if (params_.has_separate_master()) {  // the master weights of every part, in place
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (gather_master_[i]) continue;  // gathered every step
      const GradBucket& b = buckets_[i];
      const FlatRange part = part_of(b);
      Tensor whole = master.narrow(0, b.range.begin, b.range.size());
      comm_of(b)->all_gather(whole, master.narrow(0, part.begin, part.size()));
    }
  }
  Tensor m = Tensor::zeros(master.shape(), DType::F32, master.device());
  Tensor v = Tensor::zeros(master.shape(), DType::F32, master.device());
  gather_parts(m, adam_->exp_avg_flat());
  gather_parts(v, adam_->exp_avg_sq_flat());
  return {adam_->steps_taken(), param_views(params_, m), param_views(params_, v)};
}

OptimizerState& DataParallelOptimizer::load_target() {
  if (sharded_ && !load_m_.defined()) {
    const Tensor& master = params_.flat_master();
    load_m_ = Tensor::zeros(master.shape(), DType::F32, master.device());
    load_v_ = Tensor::zeros(master.shape(), DType::F32, master.device());
    load_ = {0, param_views(params_, load_m_), param_views(params_, load_v_)};
  }
  return load_;
}

void DataParallelOptimizer::loaded(bool filled) {
  if (filled) adam_->set_steps_taken(load_.step);
  if (!sharded_ || !load_m_.defined()) return;
  if (filled) {  // this rank's parts of the whole-buffer moments
    Exec& ex = Exec::for_device(load_m_.device());
    int64_t at = 0;
    for (const GradBucket& b : buckets_) {
      const FlatRange part = part_of(b);
      Tensor m = adam_->exp_avg_flat().narrow(0, at, part.size());
      Tensor v = adam_->exp_avg_sq_flat().narrow(0, at, part.size());
      ops::copy(ex, m, load_m_.narrow(0, part.begin, part.size()));
      ops::copy(ex, v, load_v_.narrow(0, part.begin, part.size()));
      at += part.size();
    }
  }
  load_ = {};  // the whole-buffer moments are not kept
  load_m_ = Tensor();
  load_v_ = Tensor();
}

}  // namespace hytra
