// Megatron's GPTDataset sampling, bit for bit (docs/spec/gpt_dataset.md): the --split ranges, the epoch count
// and separate-final-epoch rule, the shuffled document index, the sample index (documents
// concatenated across boundaries, seq_length+1 tokens per sample, consecutive samples sharing one
// token) and the shuffled sample order, all from one numpy-compatible RandomState(seed).
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_source.h"
#include "data/sequence_source.h"

namespace hytra {

struct SplitRange {
  int64_t begin = 0, end = 0;  // sequence ids [begin, end)
};

// "--split 969,30,1" over num_sequences: train, valid, test ranges; a zero weight gives no range.
std::array<std::optional<SplitRange>, 3> split_ranges(const std::string& split, int64_t num_sequences);

struct GptIndices {
  std::vector<int32_t> document_index;  // (E * sequences of the split) sequence ids, shuffled
  std::vector<int64_t> sample_index;    // ((n+1) * 2): (position in document_index, token offset)
  std::vector<int64_t> shuffle_index;   // (n): dataset item -> sample
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
};

// Megatron's epoch arithmetic for one split (docs/spec/gpt_dataset.md §3) and the sample count it implies;
// what the indices of a cache must add up to.
struct EpochPlan {
  int64_t tokens_per_epoch = 0;  // T: tokens of the split's sequences
  int64_t num_epochs = 1;        // E
  bool separate_final_epoch = false;
  int64_t sans_final = 0;   // samples before the final epoch (shuffled apart when separate)
  int64_t num_samples = 0;  // n = (E * T - 1) / seq_length; 0 when T is 0
};
EpochPlan plan_epochs(const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                      std::optional<int64_t> num_samples);

// Megatron's build_sample_idx: ((n+1) * 2) rows of (position in document_index, token offset)
// for n = (num_tokens - 1) / seq_length samples over the documents in document_index order.
std::vector<int64_t> build_sample_index(const std::vector<int64_t>& lengths, const std::vector<int32_t>& document_index,
                                        int64_t seq_length, int64_t num_tokens);

// The indices of one split. lengths: every sequence's length; num_samples: none = one epoch.
GptIndices build_gpt_indices(const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                             std::optional<int64_t> num_samples, uint32_t seed);

// Where a GPTDataset keeps its indices between runs (docs/spec/gpt_dataset.md §11): in `dir`,
// {md5 of the description}-GPTDataset-{split}-description.txt and -document_index.npy,
// -sample_index.npy, -shuffle_index.npy as Megatron names them, plus hytra's -hytra_checksums.txt.
// A cache is never trusted blindly (index_cache.h): a stale, damaged or out-of-range one is rebuilt
// with a warning, or is a named error where it cannot be rewritten.
struct IndexCache {
  std::string dir;           // --data-cache-path, or {dataset dir}/cache/GPTDataset_indices
  std::string dataset_path;  // the prefix, part of the description
  std::string split_name;    // train | valid | test
};

class GptDataset : public SampleSource {
 public:
  // vocab_size > 0: every token of a sample must lie in [0, vocab_size) (the tokenizer's size
  // before padding), else sample() is an error naming the file, sequence, item and token.
  GptDataset(std::shared_ptr<const SequenceSource> source, SplitRange range, int64_t seq_length,
             std::optional<int64_t> num_samples, uint32_t seed, const std::optional<IndexCache>& cache = {},
             int64_t vocab_size = 0);

  int64_t size() const { return int64_t(idx_.shuffle_index.size()); }
  const GptIndices& indices() const { return idx_; }
  bool loaded_from_cache() const { return from_cache_; }
  // The seq_length+1 tokens of dataset item i (0 <= i < size()).
  std::vector<int32_t> sample(int64_t i) const override;

 private:
  void check_vocabulary(const int32_t* tokens, int64_t count, int64_t seq, int64_t offset, int64_t item) const;

  std::shared_ptr<const SequenceSource> source_;
  int64_t seq_length_, vocab_size_;
  GptIndices idx_;
  bool from_cache_ = false;
};

// Megatron's per-split sample requests: train = iters * gbs; valid = (iters / eval_interval + 1) *
// eval_iters * gbs; test = eval_iters * gbs.
std::array<int64_t, 3> split_sample_counts(int64_t train_iters, int64_t global_batch, int64_t eval_interval,
                                           int64_t eval_iters);

// BlendedDataset: weights (finite, >= 0, not all zero) normalised; item s comes from the dataset k maximising
// w_k * max(s, 1) - taken_k (ties: lowest k), as its taken_k-th item.
class BlendedDataset : public SampleSource {
 public:
  BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                 int64_t size);
  int64_t size() const { return int64_t(dataset_index_.size()); }
  std::vector<int32_t> sample(int64_t i) const override;
  // Samples each dataset must provide for a blend of `size`: ceil(ceil(size * w_k) * 1.005).
  static std::vector<int64_t> per_dataset_sizes(const std::vector<double>& weights, int64_t size);

 private:
  std::vector<std::shared_ptr<const SampleSource>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace hytra
