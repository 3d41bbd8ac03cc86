// The symbol table: one row per pattern symbol -> factory of its sub-layer module (docs/ARCHITECTURE.md
// "The model from a pattern"). A symbol without a row is a "not built yet" error.
#pragma once
#include <memory>
#include <string>

#include "model/config.h"
#include "nn/module.h"
#include "nn/param.h"

namespace hytra {

struct SubLayerSpec {
  char symbol;          // '*', '-', ...
  std::string prefix;   // canonical key prefix, e.g. "decoder.layers.3."
  int64_t layer_number; // physical layer number, 1-based
};

std::unique_ptr<Module> build_sublayer(const ModelConfig& cfg, const SubLayerSpec& spec, ParamStore& store);

}  // namespace hytra
