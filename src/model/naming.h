// Canonical Megatron-Core state-dict keys assigned from the layer plan (docs/spec/names.md,
// docs/spec/README.md decision 2): every sub-layer of logical layer i lives under "decoder.layers.<i>." (a `[*-]` group
// is one logical layer, keyed like a GPT TransformerLayer); the final norm is
// "decoder.final_layernorm.weight" when the main pattern contains '[' and
// "decoder.final_norm.weight" otherwise.
#pragma once
#include <cstdint>
#include <string>

namespace hytra {

std::string layer_prefix(int64_t logical_index);
std::string final_norm_prefix(const std::string& main_pattern);  // "decoder.final_norm." or "...final_layernorm."
inline constexpr const char* kWordEmbeddingKey = "embedding.word_embeddings.weight";
inline constexpr const char* kPositionEmbeddingKey = "embedding.position_embeddings.weight";
inline constexpr const char* kOutputLayerKey = "output_layer.weight";

}  // namespace hytra
