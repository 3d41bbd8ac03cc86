// The parallel side of a `hytra train` / `hytra bench` process (docs/parallelism.md): under mpirun, srun or a
// torchrun-style launch, the GPU of the local rank, the communicators, and the data-parallel size the
// training configuration then validates against.
#pragma once
#include <functional>
#include <ostream>

#include "dist/parallel_context.h"
#include "dist/world.h"
#include "train/train_config.h"

namespace hytra {

// Call after the flags are parsed and before resolve_train_config (which checks the batch against the
// data-parallel size it sets).
dist::ParallelContext make_run_context(const dist::World& world, TrainConfig& train);

// The log of this rank: standard output on rank 0, nothing on the others.
std::ostream& rank_log(const dist::World& world);

// Runs `body` (its return value is the exit status). One process: an error propagates. Several: an error is
// printed as "hytra COMMAND: rank R: error: ..." and ends the whole job (World::abort). Keep the
// ParallelContext outside `body`: the job must end while it still holds the communicators (tearing one down
// could wait for ranks that are still in a collective).
int run_ranks(const char* command, dist::World& world, const std::function<int()>& body);

}  // namespace hytra
