// Megatron-LM flags that change nothing in hytra (kernel fusions, checkpoint-writer and data-loader tuning, Python
// runtime knobs): a Megatron launch script runs with them as it is. Each is accepted, its value checked where it has
// choices, and noted in TrainConfig::no_effect, which the trainer logs once per flag with the reason
// (docs/configuration.md "Megatron flags with no effect"). A flag whose value would ask for something hytra does not
// do (e.g. --distributed-backend gloo on a GPU run is still fine: hytra picks the backend by device) is listed only
// where every accepted value is honoured.
#pragma once
#include "cli/flag_table.h"
#include "train/train_config.h"

namespace hytra {

void add_no_effect_flags(FlagTable& table, TrainConfig& cfg);

}  // namespace hytra
