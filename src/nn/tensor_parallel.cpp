#include "nn/tensor_parallel.h"

#include "core/error.h"

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

void tp_all_reduce(const TensorParallel& tp, Tensor& t) {
  if (!tp.on()) return;
  HYTRA_ASSERT(tp.comm != nullptr, "a tensor-parallel layer without its group");
  tp.comm->all_reduce_sum(t);
}

}  // namespace hytra
