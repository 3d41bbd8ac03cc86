#include "model/naming.h"

namespace hytra {

std::string layer_prefix(int64_t logical_index) { return "decoder.layers." + std::to_string(logical_index) + "."; }

std::string final_norm_prefix(const std::string& main_pattern) {
  return main_pattern.find('[') != std::string::npos ? "decoder.final_layernorm." : "decoder.final_norm.";
}

}  // namespace hytra
