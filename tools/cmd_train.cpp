// `hytra train`: parse Megatron-style flags (and --config FILE), then run the trainer. Under mpirun or srun
// every rank runs this (docs/parallelism.md): rank 0 logs; an error on any rank is printed with its rank and
// ends the whole job.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/parallel_run.h"
#include "commands.h"
#include "core/log.h"
#include "train/trainer.h"

namespace hytra {

int cmd_train(int argc, char** argv) {
  dist::World world;
  log_enabled = world.rank() == 0;
  std::unique_ptr<dist::ParallelContext> par;  // outlives an error (cli/parallel_run.h)
  return run_ranks("train", world, [&] {
    ModelConfig model;
    TrainConfig train_cfg;
    std::string help;
    if (!parse_train_flags(std::vector<std::string>(argv + 1, argv + argc), model, train_cfg, &help)) {
      if (world.rank() == 0) std::cout << help;
      return 0;
    }
    log_level = int(train_cfg.logging_level);
    par = std::make_unique<dist::ParallelContext>(make_run_context(world, train_cfg));
    resolve_train_config(model, train_cfg);
    train(model, train_cfg, rank_log(world), par.get());
    return 0;
  });
}

}  // namespace hytra
