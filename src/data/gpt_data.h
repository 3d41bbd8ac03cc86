// The train/valid/test datasets of `--data-path`: one prefix (a GPTDataset per split) or weighted
// prefixes `W1 P1 W2 P2 ...` (a GPTDataset per prefix and split, blended; docs/spec/gpt_dataset.md §10).
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_source.h"

namespace hytra {

struct DataSplit {
  std::shared_ptr<const SampleSource> data;  // null when the split is empty (zero weight)
  int64_t size = 0;                          // samples available
};

// num_samples per split: none = one epoch (a single prefix only; blends need counts). The indices
// are cached in cache_dir, or (empty) in {each dataset's directory}/cache/GPTDataset_indices.
// vocab_size > 0: a sample holding a token outside [0, vocab_size) is an error (GptDataset).
std::array<DataSplit, 3> build_gpt_splits(const std::vector<std::string>& data_path, const std::string& split,
                                          int64_t seq_length, uint32_t seed,
                                          const std::array<std::optional<int64_t>, 3>& num_samples,
                                          const std::string& cache_dir = "", int64_t vocab_size = 0);

}  // namespace hytra
