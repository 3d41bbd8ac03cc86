#include "nn/param.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "ops/ops.h"

namespace hytra {

Param& ParamStore::create(const std::string& name, const Shape& shape, InitKind init, double init_std, bool no_decay) {
  HYTRA_ASSERT(!finalized(), "parameter ", name, " created after finalize()");
  HYTRA_CHECK(by_name_.count(name) == 0, "duplicate parameter name '", name, "'");
  // Shapes come from the size flags: a product too large for int64 must not reach finalize().
  const int64_t n = checked_numel(shape, 8);
  HYTRA_CHECK(n >= 0 && n <= INT64_MAX / 8 - num_elements_, "parameter '", name, "' of shape ", shape_str(shape),
              " is too large: the model's parameters would not fit in 64-bit sizes (check the size flags)");
  auto p = std::make_unique<Param>();
  p->name = name;
  p->shape = shape;
  p->init = init;
  p->init_std = init_std;
  p->no_decay = no_decay;
  num_elements_ += n;
  Param* raw = p.get();
  owned_.push_back(std::move(p));
  order_.push_back(raw);
  by_name_[name] = raw;
  return *raw;
}

Shape Param::full_shape() const {
  Shape s = shape;
  if (shard.split()) {
    s[size_t(shard.dim)] = 0;
    for (int64_t part : shard.parts) s[size_t(shard.dim)] += part;
  }
  return s;
}

namespace {
// Visits each part of a shard: its slice's offset along the dim in the whole tensor and in the shard, and its size.
template <class F>
void each_part(const ParamShard& s, F&& f) {
  int64_t whole = 0, mine = 0;
  for (int64_t part : s.parts) {
    const int64_t n = part / s.count;
    f(whole + s.index * n, mine, n);
    whole += part;
    mine += n;
  }
}
Shape with_dim(Shape s, int dim, int64_t n) {
  s[size_t(dim)] = n;
  return s;
}
}  // namespace

void copy_shard(Exec& ex, Tensor& local, const Tensor& full, const ParamShard& s) {
  if (!s.split()) return ops::copy(ex, local, full);
  if (s.parts.size() == 1) return ops::slice_copy(ex, local, full, s.dim, s.index * (s.parts[0] / s.count));
  each_part(s, [&](int64_t at_whole, int64_t at_mine, int64_t n) {
    Tensor piece = Tensor::empty(with_dim(local.shape(), s.dim, n), local.dtype(), local.device());
    ops::slice_copy(ex, piece, full, s.dim, at_whole);
    ops::slice_scatter(ex, local, piece, s.dim, at_mine);
  });
}

void place_shard(Exec& ex, Tensor& full, const Tensor& local, const ParamShard& s) {
  if (!s.split()) return ops::copy(ex, full, local);
  each_part(s, [&](int64_t at_whole, int64_t at_mine, int64_t n) {
    Tensor piece = Tensor::empty(with_dim(local.shape(), s.dim, n), local.dtype(), local.device());
    ops::slice_copy(ex, piece, local, s.dim, at_mine);
    ops::slice_scatter(ex, full, piece, s.dim, at_whole);
  });
}

Param* ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void ParamStore::finalize(DType dtype, Device device, int64_t align) {
  HYTRA_ASSERT(!finalized(), "finalize() called twice");
  HYTRA_ASSERT(align > 0 && align % kAlign == 0, "ParamStore::finalize: align ", align, " is not a multiple of ",
               kAlign);
  HYTRA_CHECK(dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16,
              "parameters: dtype must be fp32, fp64 or bf16, got ", dtype_name(dtype));
  auto align_up = [align](int64_t i) { return (i + align - 1) / align * align; };
  int64_t end = 0;  // of the previous parameter
  for (Param* p : order_) {
    p->offset = p->follows_previous ? end : align_up(end);
    end = p->offset + shape_numel(p->shape);
  }
  const int64_t total = align_up(end);
  values_ = Tensor::zeros({total}, dtype, device);
  master_ = dtype == DType::BF16 ? Tensor::zeros({total}, DType::F32, device) : values_;
  grads_ = Tensor::zeros({total}, dtype == DType::F64 ? DType::F64 : DType::F32, device);
  for (Param* p : order_) {
    const int64_t n = shape_numel(p->shape);
    p->value = values_.narrow(0, p->offset, n).view(p->shape);
    p->master = master_.narrow(0, p->offset, n).view(p->shape);
    p->grad = grads_.narrow(0, p->offset, n).view(p->shape);
  }
}

void ParamStore::sync_values_from_master() {
  if (has_separate_master()) ops::copy(Exec::for_device(values_.device()), values_, master_);
}

namespace {
// Zeroes the gradients of the parameters `pick` selects, one memset per run of consecutive ones (the zero
// padding between them included).
template <class Pick>
void zero_runs(const std::vector<Param*>& order, const Tensor& grads, Pick pick) {
  const size_t elem = dtype_size(grads.dtype());
  int64_t run_start = -1, run_end = -1;
  auto flush = [&] {
    if (run_start >= 0 && run_end > run_start)
      memset_any(static_cast<char*>(grads.raw()) + size_t(run_start) * elem, grads.device(), 0,
                 size_t(run_end - run_start) * elem);
    run_start = -1;
  };
  for (const Param* p : order) {
    if (pick(*p)) {
      if (run_start < 0) run_start = p->offset;
      run_end = p->offset + shape_numel(p->shape);
    } else {
      flush();
    }
  }
  flush();
}
}  // namespace

void ParamStore::zero_grad(bool lazy) {
  if (!lazy) {
    memset_any(grads_.raw(), grads_.device(), 0, grads_.nbytes());
    for (Param* p : order_) p->grad_stale = false;
    return;
  }
  zero_runs(order_, grads_, [](const Param& p) { return !p.grad_by_overwrite; });
  for (Param* p : order_) p->grad_stale = p->grad_by_overwrite;
}

void ParamStore::finish_grads() { finish_grads(0, order_.size()); }

void ParamStore::finish_grads(size_t first, size_t end) {
  const std::vector<Param*> some(order_.begin() + std::ptrdiff_t(first), order_.begin() + std::ptrdiff_t(end));
  zero_runs(some, grads_, [](const Param& p) { return p.grad_stale; });
  for (Param* p : some) p->grad_stale = false;
}

namespace {
// The uniform kinds, element by element in double (then rounded once to the master's dtype).
void init_uniform_kind(const Param& p, Tensor& master, uint64_t seed) {
  const uint64_t stream = stream_id(p.name.c_str());
  std::vector<double> v(size_t(master.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const double u = double(philox_uniform01(seed, stream, uint64_t(i)));
    switch (p.init) {
      case InitKind::Uniform: v[i] = p.init_lo + u * (p.init_hi - p.init_lo); break;
      case InitKind::LogUniform: v[i] = std::log(p.init_lo + u * (p.init_hi - p.init_lo)); break;
      case InitKind::MambaDtBias: {
        const double dt =
            std::max(std::exp(std::log(p.init_lo) + u * (std::log(p.init_hi) - std::log(p.init_lo))), 1e-4);
        v[i] = dt + std::log(-std::expm1(-dt));  // softplus^-1(dt)
        break;
      }
      default: HYTRA_ASSERT(false, "not a uniform init kind");
    }
  }
  Tensor host = Tensor::empty(master.shape(), master.dtype());
  host.copy_from_f64(v);
  ops::copy(Exec::for_device(master.device()), master, host.to(master.device()));
}
}  // namespace

void init_params(ParamStore& store, uint64_t seed) {
  for (Param* p : store.all()) {
    Exec& ex = Exec::for_device(p->master.device());
    // A shard: the whole tensor's values, then its slices.
    Tensor master =
        p->shard.split() ? Tensor::empty(p->full_shape(), p->master.dtype(), p->master.device()) : p->master;
    switch (p->init) {
      case InitKind::Normal:
        if (p->init_groups == 1) {
          ops::random_normal(ex, master, seed, stream_id(p->name.c_str()), 0.0, p->init_std);
        } else {
          for (int64_t g = 0; g < p->init_groups; ++g) {
            Tensor slice = master.narrow(0, g, 1);
            ops::random_normal(ex, slice, seed, stream_id((p->name + std::to_string(g)).c_str()), 0.0, p->init_std);
          }
        }
        break;
      case InitKind::Zeros: ops::fill(ex, master, 0.0); break;
      case InitKind::Ones: ops::fill(ex, master, 1.0); break;
      case InitKind::Uniform:
      case InitKind::LogUniform:
      case InitKind::MambaDtBias: init_uniform_kind(*p, master, seed); break;
    }
    if (p->shard.split()) copy_shard(ex, p->master, master, p->shard);
  }
  store.sync_values_from_master();
}

}  // namespace hytra
