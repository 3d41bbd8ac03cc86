// The optimizer step of a (data-parallel) run, docs/parallelism.md. After the backward, the gradients are
// summed over the data-parallel ranks (each micro-batch's already scaled by 1 / (micro-batches x ranks)),
// then clipped on their global norm and applied by AdamW, bucket by bucket (train/grad_buckets.h):
//  - replicated (the default): each bucket all-reduced, every rank updating every parameter;
//  - sharded (--use-distributed-optimizer, Megatron's ZeRO-1): each bucket cut into one equal part a rank; the
//    gradients reduce-scattered, each rank holding the Adam moments of its parts alone and updating its parts
//    of the fp32 master weights, whose values (bf16 in bf16 runs) are then all-gathered (the masters too in a
//    bucket with a parameter whose forward reads its master, Param::master_in_forward). Checkpoints hold the
//    whole state either way (gathered for a save, each rank keeping its parts after a load), so they load into
//    any number of ranks.
// Overlap (Megatron's --overlap-grad-reduce / --overlap-param-gather): as ParamHooks, the optimizer hears from
// the last micro-batch's backward which gradients are complete and starts each finished bucket's reduction
// then, on the communicator's own stream; after the step it starts the buckets' gathers at once and the next
// forward waits for each bucket only where it first reads one of its parameters. The results are those of the
// same buckets without overlap, bit for bit.
// One process (no group): the plain AdamW step, bitwise as before.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "nn/context.h"
#include "train/adamw.h"
#include "train/grad_buckets.h"

namespace hytra {

struct DataParallelOptions {
  bool sharded = false;               // --use-distributed-optimizer
  int64_t bucket_elems = 0;           // --ddp-bucket-size (0: Megatron's default)
  bool overlap_grad_reduce = false;   // --overlap-grad-reduce
  bool overlap_param_gather = false;  // --overlap-param-gather (sharded only)
  // Expert parallelism (docs/parallelism.md "Expert parallelism"): the routed experts' weights (Param::expert_parallel,
  // in buckets of their own) reduce, shard and gather over `expert_dp`, the ranks holding the same experts, and
  // their squares in the gradient norm sum over `expert_ep`, the ranks holding the others. Null without.
  dist::Communicator* expert_dp = nullptr;
  dist::Communicator* expert_ep = nullptr;
};

class DataParallelOptimizer final : public ParamHooks {
 public:
  DataParallelOptimizer(ParamStore& params, const AdamWConfig& cfg, dist::Communicator* dp,
                        const DataParallelOptions& opt);
  // ParamStore::finalize's alignment for a run on `ranks` data-parallel ranks (sharded: the buckets divide).
  static int64_t param_align(int ranks, bool sharded);

  // What the log says: the buckets, the scheme and the overlap (a data-parallel run).
  std::string describe() const;
  // The bytes of this rank's Adam moments (its parts under the distributed optimizer).
  int64_t moment_bytes() const { return adam_->exp_avg_flat().nbytes() + adam_->exp_avg_sq_flat().nbytes(); }
  // Whether the hooks communicate during the micro-batch (then it runs eagerly, not as a CUDA graph replay).
  bool communicates_in(bool first_in_step, bool last_in_step) const;
  // A pipeline stage: the gradient norm sums over the pipeline's stages, leaving out `not_counted` (a later
  // stage's copy of the word embedding, counted on the first stage; may be null). `shared`: the word embedding
  // whose gradient the trainer sums between the first and last stage after the pipeline's transfers (null
  // elsewhere): its bucket is not reduced during the backward, but by reduce_gradients, after that sum.
  void set_pipeline(dist::Communicator* pp, const Param* not_counted, const Param* shared);
  // A tensor-parallel rank (docs/parallelism.md "Tensor parallelism"): the gradients of the parameters marked
  // Param::tp_partial_grad are summed over the group, and the norm sums over it, the parameters held whole on every
  // rank counted on its first rank alone.
  void set_tensor_parallel(dist::Communicator* tp);
  // Before each training micro-batch (a pipeline: before each backward): its backward starts the reductions
  // when it is the step's last.
  void begin_micro_batch(bool last_in_step) { armed_ = overlap_grad_ && last_in_step && dp_ != nullptr; }
  // Sums the gradients over the ranks (sharded: this rank's parts) and returns their global L2 norm.
  double reduce_gradients(Exec& ex);
  // The L2 norm of the fp32 master weights (Megatron's --log-params-norm), and the number of gradient elements
  // equal to zero (--log-num-zeros-in-grad; after reduce_gradients): over every parameter once, as the gradient norm
  // counts them.
  double params_norm(Exec& ex);
  int64_t grad_zeros(Exec& ex);
  // AdamW at lr with the gradients times grad_scale (the clip coefficient); sharded: then the gathers.
  void step(Exec& ex, double lr, double grad_scale);
  // Waits for the step's gathers (overlap): before the values are read outside a training forward.
  void finish_gather();
  // The whole optimizer state (sharded: gathered from every rank, so every rank calls it; the master weights
  // gathered too).
  OptimizerState state_for_save();
  // Where a checkpoint's optimizer state is read to (sharded: whole-buffer moments, until loaded()); then
  // loaded(filled) takes it in when the load filled it, and drops the whole-buffer moments.
  OptimizerState& load_target();
  void loaded(bool filled);

  void params_needed(size_t end) override;
  void grads_ready(size_t first, size_t end) override;

 private:
  enum class Statistic { SumOfSquares, Zeros };
  // The statistic of `flat` (a flat buffer of the parameter store) over what this rank counts, summed over the
  // ranks: the data-parallel parts (sharded), the expert-parallel, tensor-parallel and pipeline groups.
  double counted_total(Exec& ex, const Tensor& flat, Statistic stat);
  FlatRange part_of(const GradBucket& b) const;  // this rank's part of a bucket (sharded)
  dist::Communicator* comm_of(const GradBucket& b) const { return b.expert ? edp_ : dp_; }
  void reduce(size_t bucket);                    // starts a bucket's reduction
  // Every bucket's part of `compact` (this rank's parts one after the other) gathered into `whole`.
  void gather_parts(Tensor& whole, const Tensor& compact);

  ParamStore& params_;
  dist::Communicator* dp_;
  dist::Communicator* pp_ = nullptr;
  dist::Communicator* tp_ = nullptr;
  dist::Communicator *ep_ = nullptr, *edp_ = nullptr;  // expert parallelism (DataParallelOptions)
  std::vector<FlatRange> expert_ranges_;               // runs of counted expert-parallel parameters (recount), in order
  std::vector<FlatRange> not_counted_;  // elements the norm leaves out (set_pipeline, set_tensor_parallel), in order
  std::vector<bool> counted_;           // per parameter
  void leave_out(const Param* p);       // marks p uncounted; recount() then rebuilds the ranges
  void recount();
  size_t deferred_ = SIZE_MAX;  // the bucket the backward does not reduce (set_pipeline)
  bool sharded_, overlap_grad_, overlap_param_;
  std::vector<GradBucket> buckets_;
  // Per bucket (bf16 runs): it holds a parameter whose forward reads the master weights, so its fp32 masters are
  // gathered and its values rounded from them on each rank (the others gather their bf16 values alone).
  std::vector<bool> gather_master_;
  void gathered(size_t bucket);    // after a bucket's gather: its values from the masters where needed
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<int64_t> unready_;   // per bucket: parameters whose gradients are not complete yet
  std::vector<bool> param_ready_;  // per parameter, this step
  std::vector<bool> reduced_;      // per bucket: its reduction started this step
  dist::Communicator::Ticket last_reduce_ = -1, last_expert_reduce_ = -1;
  std::vector<dist::Communicator::Ticket> gather_;  // per bucket: its gather's ticket (overlap)
  size_t gathered_ = 0;                             // buckets [0, gathered_) need no wait
  bool armed_ = false;
  std::unique_ptr<AdamW> adam_;
  OptimizerState load_;
  Tensor load_m_, load_v_;  // sharded: the whole-buffer moments load_ views
};

}  // namespace hytra
