// Loading checkpoints written under other names or layouts (docs/spec/names.md, docs/spec/README.md decision 2):
//  - aliases: decoder.final_norm <-> decoder.final_layernorm; Megatron's local (non-TE) spec names
//    input_layernorm.weight <-> self_attention.linear_qkv.layer_norm_weight and
//    pre_mlp_layernorm.weight <-> mlp.linear_fc1.layer_norm_weight (dense MLP layers);
//    mixer.conv1d_weight/bias <-> mixer.conv1d.weight/bias;
//  - canonical names for Megatron's other spellings (canonical_file_key) and layers of a GPT or grouped layout in an
//    ungrouped model or the reverse (keys_in_model_layout);
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

// A file key under the name hytra's loader reads it by (docs/spec/names.md): the MTP inner layer's sharded
// `mtp.layers.<d>.transformer_layer.` is `mtp.layers.<d>.mtp_model_layer.`, and a GPT depth's single inner layer
// (no index) is its layer 0; a group's local `<stack>layers.<j>.layers.<m>.` is the logical `<stack>layers.<j>.`;
// sequential experts' `mlp.experts.local_experts.<j>.linear_fcN.weight|bias` are the indexed
// `mlp.experts.linear_fcN.weight<j>|bias<j>`. Other keys are returned unchanged.
std::string canonical_file_key(const std::string& key);

// Layers of one layout loaded into the other (docs/spec/names.md §3 interop), for the decoder and each MTP depth's
// stack: a GPT or grouped checkpoint (a layer index holding several sub-layers: attention with its input norm, MLP or
// MoE with the pre-MLP norm, Mamba mixer) into an ungrouped hybrid model, or the reverse. The file's i-th layer with
// a part fills the model's i-th layer with that part (Mamba layers absent from a GPT file keep their initial values).
// Returns the name each (canonical) file key takes in the model's layout, unchanged where both layouts agree;
// mismatched part counts and keys of no part are named errors.
std::vector<std::string> keys_in_model_layout(const std::vector<std::string>& file_keys,
                                              const std::set<std::string>& expected);

enum class Strictness { AssumeOkUnexpected, LogAll, RaiseUnexpected, RaiseAll };

// Which file keys fill which expected keys, per the aliases; missing and unexpected keys are
// handled per `strictness` (errors list every key; log_all reports them in `warnings`).
std::map<std::string, std::string> match_keys(const std::vector<std::string>& file_keys,
                                              const std::set<std::string>& expected, Strictness strictness,
                                              const std::string& file, std::vector<std::string>& warnings);

}  // namespace hytra
