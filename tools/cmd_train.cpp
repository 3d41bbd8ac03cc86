// `hytra train`: parse Megatron-style flags (and --config FILE), then run the trainer.
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "cli/flags.h"
#include "train/trainer.h"

namespace hytra {

int cmd_train(int argc, char** argv) {
  ModelConfig model;
  TrainConfig train_cfg;
  std::string help;
  if (!parse_train_args(std::vector<std::string>(argv + 1, argv + argc), model, train_cfg, &help)) {
    std::cout << help;
    return 0;
  }
  train(model, train_cfg, std::cout);
  return 0;
}

}  // namespace hytra
