// `hytra train`: parse Megatron-style flags (and --config FILE), then run the trainer. Under mpirun or srun
// every rank runs this (docs/parallelism.md): rank 0 logs; an error on any rank is printed with its rank and
// ends the whole job.
#include <cstdio>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/parallel_run.h"
#include "commands.h"
#include "core/log.h"
#include "train/trainer.h"

namespace hytra {

namespace {

// A stream that drops what it is given (the log of ranks other than 0).
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

}  // namespace

int cmd_train(int argc, char** argv) {
  dist::World world;
  log_enabled = world.rank() == 0;
  // Outside the try: after an error the job is ended before any communicator is torn down (a teardown can
  // wait for ranks that are still in a collective).
  std::unique_ptr<dist::ParallelContext> par;
  try {
    ModelConfig model;
    TrainConfig train_cfg;
    std::string help;
    if (!parse_train_flags(std::vector<std::string>(argv + 1, argv + argc), model, train_cfg, &help)) {
      if (world.rank() == 0) std::cout << help;
      return 0;
    }
    par = std::make_unique<dist::ParallelContext>(make_run_context(world, train_cfg));
    resolve_train_config(model, train_cfg);
    NullBuffer null_buffer;
    std::ostream null_log(&null_buffer);
    train(model, train_cfg, world.rank() == 0 ? std::cout : null_log, par.get());
    return 0;
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;
    std::cout << std::flush;
    std::fprintf(stderr, "hytra train: rank %d: error: %s\n", world.rank(), e.what());
    std::fflush(stderr);
    world.abort(1);
    return 1;
  }
}

}  // namespace hytra
