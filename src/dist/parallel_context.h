// The communicators a training run uses, made once from the world and the parallel sizes and passed
// down explicitly (no globals): the data-parallel, tensor-parallel, expert-parallel and pipeline groups (context
// parallelism is not built yet: its size is 1). CPU runs
// communicate through the MPI world; CUDA runs through NCCL (bootstrapped by the MPI world, or by
// NCCL_COMM_ID under a torchrun-style launch, which also gives a one-rank world its NCCL group).
#pragma once
#include <memory>

#include "dist/communicator.h"
#include "dist/parallel_dims.h"
#include "dist/world.h"

namespace hytra::dist {

struct ParallelContext {
  ParallelDims dims;
  int rank = 0;                         // in the world
  std::unique_ptr<Communicator> world;  // NCCL runs: the NCCL world (the MPI one stays in World)
  std::unique_ptr<Communicator> dp;     // the data-parallel group; nullptr in a single process
  std::unique_ptr<Communicator> tp;     // the tensor-parallel group; nullptr without tensor parallelism
  // Expert parallelism (the expert layout): the ranks sharing one set of tokens' experts, and the expert-data-parallel
  // ranks holding the same experts; nullptr without expert parallelism.
  std::unique_ptr<Communicator> ep, edp;
  std::unique_ptr<Communicator> pp;     // the pipeline group; nullptr without pipeline parallelism
  // The first and last stage of this rank's pipeline (Megatron's embedding group: the word embedding's
  // gradients are summed there); nullptr on the stages between and without pipeline parallelism.
  std::unique_ptr<Communicator> embedding;
  int dp_rank() const { return dp ? dp->rank() : 0; }
  int dp_size() const { return dp ? dp->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
  int ep_size() const { return ep ? ep->size() : 1; }
  int tp_rank() const { return tp ? tp->rank() : 0; }
  int tp_size() const { return tp ? tp->size() : 1; }
  int pp_rank() const { return pp ? pp->rank() : 0; }
  int pp_size() const { return pp ? pp->size() : 1; }
};

// Every rank of the world calls it (the groups are split collectively). cuda: the run's device is a GPU
// (selected already); compute_stream: the cudaStream_t its kernels run on.
ParallelContext make_parallel_context(const World& world, const ParallelSizes& sizes, bool cuda, void* compute_stream);

}  // namespace hytra::dist
