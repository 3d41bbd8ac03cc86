// The flag rows of `hytra train`: one row per Megatron-LM flag hytra implements, bound to its
// config field (docs/spec/megatron_cli.md §6 names and defaults; docs/configuration.md lists them).
#pragma once
#include "model/config.h"
#include "cli/flag_table.h"
#include "train/train_config.h"

namespace hytra {

void add_model_flags(FlagTable& table, ModelConfig& cfg);
void add_train_flags(FlagTable& table, TrainConfig& cfg);

// Parses `hytra train` arguments (argv after the subcommand) into the two configs and validates
// both. Returns false when --help was asked (the help text is then in *help).
bool parse_train_args(const std::vector<std::string>& args, ModelConfig& model, TrainConfig& train,
                      std::string* help);

}  // namespace hytra
