// One row per pattern symbol (docs/spec/pattern.md §1): everything the model needs to know about a
// layer kind, in one place. Adding a layer kind is one row here (with its factory and FLOPs), its
// nn/ layer, its config fields and flags, and a gradient check (docs/ARCHITECTURE.md).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "nn/module.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"

namespace hytra {

struct SubLayerSpec {
  char symbol;           // '*', '-', ...
  std::string prefix;    // canonical key prefix, e.g. "decoder.layers.3."
  int64_t layer_number;  // physical layer number, 1-based
  TensorParallel tp;     // the tensor-parallel group its weights are split over (nn/tensor_parallel.h)
  ExpertParallel ep;     // the expert-parallel group its routed experts are divided among
};

struct LayerKind {
  char symbol;
  const char* name;              // for messages: "Mamba-2"
  const char* hyper_connection;  // its mHC key after the logical layer's prefix (docs/spec/README.md decision 3)
  std::optional<RecomputeModule> recompute_module;  // the --recompute-modules entry that reruns its body
  // The sub-layer module; nullptr: the symbol parses but is not built yet.
  std::unique_ptr<Module> (*build)(const ModelConfig&, const SubLayerSpec&, ParamStore&);
  // What this kind needs of the configuration, as "--flag: ..." messages; may be nullptr. Run by
  // ModelConfig::validate only once the field checks passed (sizes positive and bounded).
  void (*check)(const ModelConfig&, std::vector<std::string>& errors);
  int64_t (*matmul_params)(const ModelConfig&);  // weights one token is multiplied by (6 FLOPs each per step)
  double (*other_flops)(const ModelConfig&);     // per token and step beyond the matmuls (attention core, scans)
};

// Every symbol of the pattern language, built or not, in the grammar's order.
const std::vector<LayerKind>& layer_kinds();
const LayerKind& layer_kind(char symbol);  // a symbol of layer_kinds()

// The sub-layer module for spec.symbol (a built kind of a validated configuration).
std::unique_ptr<Module> build_sublayer(const ModelConfig& cfg, const SubLayerSpec& spec, ParamStore& store);

// Whether selective recompute (--recompute-modules) reruns the body of a sub-layer of this kind.
bool selective_body(const ModelConfig& cfg, char symbol);

// Sub-layers per symbol (MTP inner layers included) and MTP depths: what FLOPs are counted from.
struct LayerCounts {
  std::map<char, int64_t> sublayers;
  int64_t mtp_depths = 0;
  int64_t of(char symbol) const {
    auto it = sublayers.find(symbol);
    return it == sublayers.end() ? 0 : it->second;
  }
};

// What a tensor-parallel size of `tp` cannot split in this model (its layer kinds per `counts`), as "--flag: ..."
// messages: the heads, KV groups, Mamba heads and groups, gated-delta-net heads, FFN and expert widths and the padded
// vocabulary must divide by tp (docs/parallelism.md "Tensor parallelism").
std::vector<std::string> tensor_parallel_errors(const ModelConfig& cfg, const LayerCounts& counts, int tp);

}  // namespace hytra
