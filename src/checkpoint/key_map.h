// Loading checkpoints written under other names or layouts (docs/spec/names.md, docs/spec/README.md decision 2):
//  - aliases: decoder.final_norm <-> decoder.final_layernorm; Megatron's local (non-TE) spec names
//    input_layernorm.weight <-> self_attention.linear_qkv.layer_norm_weight and
//    pre_mlp_layernorm.weight <-> mlp.linear_fc1.layer_norm_weight (dense MLP layers);
//    mixer.conv1d_weight/bias <-> mixer.conv1d.weight/bias;
//  - grouped experts: one `weight` [E, out, in] (or packed [E*out, in]) <-> per-expert
//    `weight0..weight{E-1}` with TEGroupedLinear's rules (docs/spec/names.md §6), applied by the loader
//    (train/checkpointing.cpp, the one implementation; tests/e2e/test_checkpoint.cpp exercises it);
//  - strictness (--ckpt-strictness) for keys the model lacks or the file lacks.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace hytra {

// The key of `expected` that file key `key` stands for ("" if none): itself, or an alias.
std::string alias_target(const std::string& key, const std::set<std::string>& expected);

// Megatron GPT checkpoints (attention and MLP of layer i under one decoder.layers.<i>) loaded into
// an ungrouped hybrid model (`*-*-`): the i-th `*` takes GPT layer i's self_attention.*, the i-th
// `-` its mlp.* (docs/spec/names.md §3 interop; Mamba layers keep their initial values). Returns the file key
// each file key stands for in the model's naming, or the keys unchanged when the file is not in GPT
// layout or the model has grouped layers; mismatched layer counts are an error.
std::vector<std::string> gpt_keys_as_hybrid(const std::vector<std::string>& file_keys,
                                            const std::set<std::string>& expected);

enum class Strictness { AssumeOkUnexpected, LogAll, RaiseUnexpected, RaiseAll };

// Which file keys fill which expected keys, per the aliases; missing and unexpected keys are
// handled per `strictness` (errors list every key; log_all reports them in `warnings`).
std::map<std::string, std::string> match_keys(const std::vector<std::string>& file_keys,
                                              const std::set<std::string>& expected, Strictness strictness,
                                              const std::string& file, std::vector<std::string>& warnings);

}  // namespace hytra
