#include "train/tensor_parallel_state.h"

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

std::vector<ParamState> join_shards(std::vector<ParamState> mine, const ParamStore& params, dist::Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return mine;
  const std::vector<Param*>& all = params.all();
  HYTRA_ASSERT(mine.size() == all.size(), "join_shards: one state per parameter");
  for (size_t i = 0; i < all.size(); ++i) {
    const Param& p = *all[i];
    if (!p.shard.split()) continue;
    for (Tensor* t : {&mine[i].value, &mine[i].exp_avg, &mine[i].exp_avg_sq}) {
      Exec& ex = Exec::for_device(t->device());
      Tensor local = Tensor::empty(t->shape(), t->dtype(), t->device());
      ops::copy(ex, local, *t);
      Tensor shards = Tensor::empty({tp->size(), local.numel()}, t->dtype(), t->device());  // rank by rank
      tp->all_gather(shards, local);
      if (tp->rank() != 0) continue;
      Tensor whole = Tensor::empty(p.full_shape(), t->dtype(), t->device());
      ParamShard s = p.shard;
      for (s.index = 0; s.index < s.count; ++s.index)
        place_shard(ex, whole, shards.narrow(0, s.index, 1).view(t->shape()), s);
      *t = whole;
    }
  }
  if (tp->rank() != 0) return {};
  return mine;
}

}  // namespace hytra
