// The parallel side of a `hytra train` / `hytra bench` process (docs/parallelism.md): under mpirun, srun or a
// torchrun-style launch, the GPU of the local rank, the communicators, and the data-parallel size the
// training configuration then validates against.
#pragma once
#include "dist/parallel_context.h"
#include "dist/world.h"
#include "train/train_config.h"

namespace hytra {

// Call after the flags are parsed and before resolve_train_config (which checks the batch against the
// data-parallel size it sets).
dist::ParallelContext make_run_context(const dist::World& world, TrainConfig& train);

}  // namespace hytra
