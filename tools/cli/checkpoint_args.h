// --use-checkpoint-args (Megatron's): the model and tokenizer flags come from the checkpoint that --load names, read
// from its run_config.yaml (the resolved flags every hytra save writes; docs/checkpoints.md "The run's flags").
//
// As Megatron's load_args_from_checkpoint: the checkpoint's value replaces the one given, except for the sizes
// Megatron takes only where the run does not give them (--num-layers, --hidden-size, --ffn-hidden-size,
// --num-attention-heads, --kv-channels, --seq-length, --max-position-embeddings, --vocab-size). The taken flags are
// the model flags that shape the network (every add_model_flags row but the run's choices: recompute, pipeline split,
// loss coefficients, initialisation) and the tokenizer flags. A checkpoint without run_config.yaml (an older hytra's,
// or one converted from Megatron) and a --load directory holding no checkpoint yet leave the flags as given, with a
// note saying so.
#pragma once
#include <string>
#include <vector>

#include "cli/flag_table.h"
#include "train/train_config.h"

namespace hytra {

// The flags --use-checkpoint-args takes, in table order.
std::vector<std::string> checkpoint_arg_flags();

// Applies the checkpoint's values to `table` (whose rows are bound to `train` and the model configuration); notes what
// changed in train.from_checkpoint. Needs train.load.
void apply_checkpoint_args(FlagTable& table, TrainConfig& train);

}  // namespace hytra
