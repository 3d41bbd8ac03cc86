#include "nn/tensor_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

void shard_param(Param& p, const TensorParallel& tp, int dim, const std::vector<int64_t>& local_parts) {
  if (!tp.on()) return;
  HYTRA_ASSERT(dim >= 0 && dim < int(p.shape.size()), p.name, ": no dim ", dim, " to split");
  int64_t sum = 0;
  p.shard.parts.clear();
  for (int64_t n : local_parts) {
    sum += n;
    p.shard.parts.push_back(n * tp.size);
  }
  HYTRA_ASSERT(sum == p.shape[size_t(dim)], p.name, ": the parts do not make up dim ", dim);
  p.shard.dim = dim;
  p.shard.count = tp.size;
  p.shard.index = tp.rank;
}

void partial_grad_param(Param& p, const TensorParallel& tp) {
  if (tp.on()) p.tp_partial_grad = true;
}

void sequence_parallel_grad(Param& p, const TensorParallel& tp) {
  if (tp.seq()) p.tp_partial_grad = true;
}

namespace {
// x as (B, T, rest) with its dims after the sequence flattened.
Tensor as_btr(const Tensor& x) {
  HYTRA_ASSERT(x.dim() >= 2 && x.is_contiguous(), "sequence parallelism: (B,T,...) activations expected, got ",
               x.desc());
  return x.view({x.size(0), x.size(1), x.numel() / std::max<int64_t>(1, x.size(0) * x.size(1))});
}
Shape with_seq(Shape s, int64_t t) {
  s[1] = t;
  return s;
}
}  // namespace

Tensor seq_gather(Exec& ex, const TensorParallel& tp, const Tensor& x) {
  const Tensor v = as_btr(x);
  const int64_t B = v.size(0), t = v.size(1), R = v.size(2);
  Tensor parts = Tensor::empty({tp.size, B, t, R}, x.dtype(), x.device());
  tp.comm->all_gather(parts, v);
  if (B == 1) return parts.view(with_seq(x.shape(), t * tp.size));
  Tensor out = Tensor::empty({B, t * tp.size, R}, x.dtype(), x.device());
  for (int r = 0; r < tp.size; ++r) ops::slice_scatter(ex, out, parts.narrow(0, r, 1).view({B, t, R}), 1, r * t);
  return out.view(with_seq(x.shape(), t * tp.size));
}

Tensor seq_reduce_scatter(Exec& ex, const TensorParallel& tp, const Tensor& x) {
  const Tensor v = as_btr(x);
  const int64_t B = v.size(0), t = v.size(1) / tp.size, R = v.size(2);
  HYTRA_ASSERT(t * tp.size == v.size(1), "sequence parallelism: ", v.size(1), " tokens do not split into ", tp.size);
  Tensor out = Tensor::empty({B, t, R}, x.dtype(), x.device());
  if (B == 1) {
    tp.comm->reduce_scatter_sum(out, v);
  } else {
    Tensor parts = Tensor::empty({tp.size, B, t, R}, x.dtype(), x.device());  // rank by rank
    for (int r = 0; r < tp.size; ++r) {
      Tensor part = parts.narrow(0, r, 1).view({B, t, R});
      ops::slice_copy(ex, part, v, 1, r * t);
    }
    tp.comm->reduce_scatter_sum(out, parts);
  }
  return out.view(with_seq(x.shape(), t));
}

Tensor seq_part(Exec& ex, const TensorParallel& tp, const Tensor& x) {
  const Tensor v = as_btr(x);
  const int64_t t = v.size(1) / tp.size;
  Tensor out = Tensor::empty({v.size(0), t, v.size(2)}, x.dtype(), x.device());
  ops::slice_copy(ex, out, v, 1, tp.rank * t);
  return out.view(with_seq(x.shape(), t));
}

void tp_all_reduce(const TensorParallel& tp, Tensor& t) {
  if (!tp.on()) return;
  HYTRA_ASSERT(tp.comm != nullptr, "a tensor-parallel layer without its group");
  tp.comm->all_reduce_sum(t);
}

}  // namespace hytra
