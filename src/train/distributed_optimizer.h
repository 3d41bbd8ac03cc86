// The optimizer step of a (data-parallel) run, docs/parallelism.md. After the backward, the gradients are
// summed over the data-parallel ranks (each micro-batch's already scaled by 1 / (micro-batches x ranks)),
// then clipped on their global norm and applied by AdamW:
//  - replicated (the default): the whole gradient buffer all-reduced, every rank updating every parameter;
//  - sharded (--use-distributed-optimizer, Megatron's ZeRO-1): the flat buffers cut into one contiguous part
//    a rank (rank r: [r S, (r + 1) S), S = ceil(N / ranks)); the gradients reduce-scattered, each rank
//    holding the Adam moments of its part alone and updating its part of the fp32 master weights, which are
//    then all-gathered. Checkpoints hold the whole state either way (gathered for a save, each rank keeping
//    its part after a load), so they load into any number of ranks.
// One process (no group): the plain AdamW step, bitwise as before.
#pragma once
#include <memory>

#include "dist/communicator.h"
#include "train/adamw.h"

namespace hytra {

class DataParallelOptimizer {
 public:
  DataParallelOptimizer(ParamStore& params, const AdamWConfig& cfg, dist::Communicator* dp, bool sharded);
  // Sums the gradients over the ranks (sharded: this rank's part) and returns their global L2 norm.
  double reduce_gradients(Exec& ex);
  // AdamW at lr with the gradients times grad_scale (the clip coefficient); sharded: then the all-gather.
  void step(Exec& ex, double lr, double grad_scale);
  // The whole optimizer state (sharded: gathered from every rank, so every rank calls it).
  OptimizerState state_for_save();
  // Where a checkpoint's optimizer state is read to (sharded: whole-buffer moments, until loaded()); then
  // loaded(filled) takes it in when the load filled it, and drops the whole-buffer moments.
  OptimizerState& load_target();
  void loaded(bool filled);

 private:
  // `part` (this rank's, at most S elements) from every rank into `all` (ranks x S, parts zero-padded to S):
  // its first N elements are the whole buffer (a collective).
  void gather(const Tensor& part, Tensor& all);
  ParamStore& params_;
  dist::Communicator* dp_;
  bool sharded_;
  int64_t part_ = 0;     // S: elements a part (sharded)
  Tensor mine_, whole_;  // sharded, every step: a part (S) and the padded buffer (ranks x S)
  std::unique_ptr<AdamW> adam_;
  OptimizerState load_;
  Tensor load_m_, load_v_;  // sharded: the whole-buffer moments load_ views
};

}  // namespace hytra
