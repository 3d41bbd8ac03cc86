// Checkpoints under tensor parallelism (docs/parallelism.md "Tensor parallelism"): a checkpoint holds the whole
// (canonical) tensors, so a save first joins each parameter's shards, and a load cuts this rank's shard out of the
// whole tensor (nn/param.h ParamShard). Checkpoints then load across any two layouts.
#pragma once
#include <functional>
#include <vector>

#include "dist/communicator.h"
#include "nn/param.h"
#include "train/checkpointing.h"

namespace hytra {

// The states with whole tensors on the group's first rank (every rank of `tp` calls it; the others get nothing
// back). `mine`: this rank's states, in the order of params.all(). Without a group: `mine` as it is.
std::vector<ParamState> join_shards(std::vector<ParamState> mine, const ParamStore& params, dist::Communicator* tp);

// Expert parallelism: the routed experts' states of every rank of `ep` on its first rank (every rank of `ep` calls
// it; the others get nothing back). A grouped expert tensor's slices are joined in place; the per-expert tensors of
// rank s (Param::expert_parallel, not split) come after, in the order of `params_of(s)`, which gives their names and
// shapes. `mine`: this rank's states, in the order of params.all().
std::vector<ParamState> join_experts(std::vector<ParamState> mine, const ParamStore& params, dist::Communicator* ep,
                                     const std::function<std::vector<Param>(int rank)>& params_of);

}  // namespace hytra
