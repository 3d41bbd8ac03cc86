// The flag rows of `hytra train`: one row per Megatron-LM flag hytra implements, bound to its
// config field (docs/spec/megatron_cli.md §6 names and defaults; docs/configuration.md lists them).
#pragma once
#include "model/config.h"
#include "cli/flag_table.h"
#include "train/train_config.h"

namespace hytra {

// --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model, --legacy-tokenizer and the --tiktoken-* flags, as
// train, preprocess and inspect-data take them (each adds its own --vocab-size).
void add_tokenizer_flags(FlagTable& table, TokenizerConfig& cfg);
void add_model_flags(FlagTable& table, ModelConfig& cfg);
void add_train_flags(FlagTable& table, TrainConfig& cfg);

// Configuration in two steps: parse_train_flags fills the configs from the flags, the --config file and, with
// --use-checkpoint-args, the checkpoint's run_config.yaml (cli/checkpoint_args.h), and records the result as
// TrainConfig::run_config (returns false when --help was asked, the help text then in *help);
// resolve_train_config completes them from files (the vocabulary size from the tokenizer, as
// Megatron) and validates both, the one place every violation is collected and named.
bool parse_train_flags(const std::vector<std::string>& args, ModelConfig& model, TrainConfig& train,
                       std::string* help);
void resolve_train_config(ModelConfig& model, TrainConfig& train);
// Both, for the subcommands and tests that want a ready configuration.
bool parse_train_args(const std::vector<std::string>& args, ModelConfig& model, TrainConfig& train,
                      std::string* help);

}  // namespace hytra
