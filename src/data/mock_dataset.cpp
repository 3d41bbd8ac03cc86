#include "data/mock_dataset.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "core/philox.h"

namespace hytra {

namespace {
// Document d's length in [2, kMaxDocLength], from the seed and split alone.
int64_t doc_length(uint64_t seed, int split, int64_t d) {
  Philox4 r = philox4x32(seed, 0x6d6f636bull + uint64_t(split), uint64_t(d));
  return 2 + int64_t(r.v[0] % uint32_t(MockDataset::kMaxDocLength - 1));
}
}  // namespace

MockDataset::MockDataset(int64_t vocab_size, int64_t seq_length, uint64_t seed, int split)
    : vocab_size_(vocab_size), seq_length_(seq_length), seed_(seed), split_(split) {
  HYTRA_CHECK(vocab_size >= 2, "--mock-data: --vocab-size must be at least 2, got ", vocab_size);
  HYTRA_CHECK(seq_length >= 1, "--mock-data: --seq-length must be positive, got ", seq_length);
}

int32_t MockDataset::token_at(int64_t position) const {
  // Walk documents: cache_ holds the start position of documents 0..k (cache_[0] = 0).
  if (cache_.empty()) cache_.push_back(0);
  while (cache_.back() <= position) {
    int64_t d = int64_t(cache_.size()) - 1;
    cache_.push_back(cache_.back() + doc_length(seed_, split_, d));
  }
  auto it = std::upper_bound(cache_.begin(), cache_.end(), position);
  int64_t d = int64_t(it - cache_.begin()) - 1;
  int64_t offset = position - cache_[size_t(d)];
  int64_t len = cache_[size_t(d) + 1] - cache_[size_t(d)];
  if (offset == len - 1) return kEod;
  return int32_t(1 + offset % (vocab_size_ - 1));
}

std::vector<int32_t> MockDataset::sample(int64_t index) const {
  HYTRA_ASSERT(index >= 0, "negative sample index ", index);
  // A resumed run starts at the checkpoint's consumed samples, which a manifest may set anywhere.
  HYTRA_CHECK(index <= (INT64_MAX - 1) / seq_length_ - 1, "--mock-data: sample ", index,
              " lies past the end of the mock stream (", INT64_MAX, " tokens)");
  std::vector<int32_t> out(size_t(seq_length_ + 1));
  // Sample j overlaps sample j+1 by one token, as in Megatron's GPTDataset.
  int64_t start = index * seq_length_;
  for (int64_t i = 0; i <= seq_length_; ++i) out[size_t(i)] = token_at(start + i);
  return out;
}

}  // namespace hytra
