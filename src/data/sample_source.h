// SampleSource: anything that yields training samples by index — seq_length+1 token ids each
// (inputs are the first seq_length, labels the last seq_length). MockDataset and the Megatron
// GPT/blended datasets implement it; the loader and the trainer only see this.
#pragma once
#include <cstdint>
#include <vector>

namespace hytra {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // The seq_length+1 tokens of sample `index` (index >= 0; sources may wrap or bound it).
  virtual std::vector<int32_t> sample(int64_t index) const = 0;
};

}  // namespace hytra
