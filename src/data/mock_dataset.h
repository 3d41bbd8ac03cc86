// Synthetic training data for --mock-data, in the spirit of Megatron's MockGPTDataset: a stream
// of "documents" whose lengths are drawn from the seed, each holding the tokens 1, 2, ..., L-1
// followed by the end-of-document token; documents are concatenated and cut into samples of
// seq_length+1 tokens (inputs are tokens[0..T), labels tokens[1..T]). The sequences are easy to
// learn, so loss falls quickly: a smoke test for the whole training path, not a benchmark of quality.
// Token ids are taken modulo the vocabulary (ids 1..vocab-1; EOD = 0).
#pragma once
#include <cstdint>
#include <vector>

#include "data/sample_source.h"

namespace hytra {

class MockDataset : public SampleSource {
 public:
  // split: 0 = train, 1 = validation, 2 = test (independent document streams).
  MockDataset(int64_t vocab_size, int64_t seq_length, uint64_t seed, int split);

  // The seq_length+1 tokens of sample `index` (any index >= 0; the stream is unbounded).
  std::vector<int32_t> sample(int64_t index) const override;

  static constexpr int32_t kEod = 0;
  static constexpr int64_t kMaxDocLength = 256;

 private:
  int32_t token_at(int64_t position) const;  // token at absolute position of the stream

  int64_t vocab_size_, seq_length_;
  uint64_t seed_;
  int split_;
  mutable std::vector<int64_t> cache_;  // start positions of documents 0..k, grown lazily
};

}  // namespace hytra
