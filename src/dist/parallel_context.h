// The communicators a training run uses, made once from the world and the parallel sizes and passed
// down explicitly (no globals). Only the data-parallel group exists yet (the other sizes are 1).
#pragma once
#include <memory>

#include "dist/communicator.h"
#include "dist/parallel_dims.h"

namespace hytra::dist {

struct ParallelContext {
  ParallelDims dims;
  int rank = 0;                      // in the world
  std::unique_ptr<Communicator> dp;  // the data-parallel group; nullptr when dp is 1
  int dp_rank() const { return dp ? dp->rank() : 0; }
  int dp_size() const { return dp ? dp->size() : 1; }
};

// world: nullptr for one process. Every rank of the world calls it (the groups are split collectively).
ParallelContext make_parallel_context(Communicator* world, const ParallelSizes& sizes);

}  // namespace hytra::dist
