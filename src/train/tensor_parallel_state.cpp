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
    if (!p.shard.split() || p.shard.experts) continue;  // (a grouped expert tensor's slices: join_experts)
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

std::vector<ParamState> join_experts(std::vector<ParamState> mine, const ParamStore& params, dist::Communicator* ep,
                                     const std::function<std::vector<Param>(int rank)>& params_of) {
  const std::vector<Param*>& all = params.all();
  HYTRA_ASSERT(mine.size() == all.size(), "join_experts: one state per parameter");
  for (size_t i = 0; i < all.size(); ++i) {  // grouped tensors: each rank's experts, gathered in place
    const Param& p = *all[i];
    if (!p.expert_parallel || !p.shard.experts) continue;
    for (Tensor* t : {&mine[i].value, &mine[i].exp_avg, &mine[i].exp_avg_sq}) {
      Exec& ex = Exec::for_device(t->device());
      Tensor local = Tensor::empty(t->shape(), t->dtype(), t->device());
      ops::copy(ex, local, *t);
      Tensor shards = Tensor::empty({ep->size(), local.numel()}, t->dtype(), t->device());
      ep->all_gather(shards, local);
      Tensor whole = Tensor::empty(p.full_shape(), t->dtype(), t->device());
      ParamShard s = p.shard;
      for (s.index = 0; s.index < s.count; ++s.index)
        place_shard(ex, whole, shards.narrow(0, s.index, 1).view(t->shape()), s);
      *t = whole;
    }
  }
  auto per_expert = [](const Param& p) { return p.expert_parallel && !p.shard.experts; };
  if (ep->rank() != 0) {  // the per-expert tensors to the first rank, in parameter order
    for (size_t i = 0; i < all.size(); ++i)
      if (per_expert(*all[i]))
        for (Tensor* t : {&mine[i].value, &mine[i].exp_avg, &mine[i].exp_avg_sq}) ep->send(*t, 0);
    return {};
  }
  for (int s = 1; s < ep->size(); ++s)
    for (const Param& q : params_of(s)) {
      const Param* p = &q;
      if (!per_expert(*p)) continue;
      const Device dev = mine.empty() ? ep->device() : mine[0].value.device();
      // Whole tensors: a tensor-parallel shard was joined on its sender first (join_shards).
      const Shape shape = p->full_shape();
      ParamState st{p->name, Tensor::empty(shape, DType::F32, dev), Tensor::empty(shape, DType::F32, dev),
                    Tensor::empty(shape, DType::F32, dev)};
      for (Tensor* t : {&st.value, &st.exp_avg, &st.exp_avg_sq}) ep->recv(*t, s);
      mine.push_back(std::move(st));
    }
  return mine;
}

}  // namespace hytra
