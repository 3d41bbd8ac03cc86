// Megatron's GPTDataset sampling, bit for bit (SPEC.md B1.7): the --split ranges, the epoch count
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
  int64_t num_epochs = 1;              // (these two only when built, not when read from a cache)
  bool separate_final_epoch = false;
};

// Megatron's build_sample_idx: ((n+1) * 2) rows of (position in document_index, token offset)
// for n = (num_tokens - 1) / seq_length samples over the documents in document_index order.
std::vector<int64_t> build_sample_index(const std::vector<int64_t>& lengths, const std::vector<int32_t>& document_index,
                                        int64_t seq_length, int64_t num_tokens);

// The indices of one split. lengths: every sequence's length; num_samples: none = one epoch.
GptIndices build_gpt_indices(const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                             std::optional<int64_t> num_samples, uint32_t seed);

// Where a GPTDataset keeps its indices between runs (SPEC B1.7 "Cache files"): in `dir`,
// {md5 of the description}-GPTDataset-{split}-description.txt and -document_index.npy,
// -sample_index.npy, -shuffle_index.npy; reused when present, else built and written.
struct IndexCache {
  std::string dir;           // --data-cache-path, or {dataset dir}/cache/GPTDataset_indices
  std::string dataset_path;  // the prefix, part of the description
  std::string split_name;    // train | valid | test
};

class GptDataset : public SampleSource {
 public:
  GptDataset(std::shared_ptr<const SequenceSource> source, SplitRange range, int64_t seq_length,
             std::optional<int64_t> num_samples, uint32_t seed, const std::optional<IndexCache>& cache = {});

  int64_t size() const { return int64_t(idx_.shuffle_index.size()); }
  const GptIndices& indices() const { return idx_; }
  bool loaded_from_cache() const { return from_cache_; }
  // The seq_length+1 tokens of dataset item i (0 <= i < size()).
  std::vector<int32_t> sample(int64_t i) const override;

 private:
  std::shared_ptr<const SequenceSource> source_;
  int64_t seq_length_;
  GptIndices idx_;
  bool from_cache_ = false;
};

// Megatron's per-split sample requests: train = iters * gbs; valid = (iters / eval_interval + 1) *
// eval_iters * gbs; test = eval_iters * gbs.
std::array<int64_t, 3> split_sample_counts(int64_t train_iters, int64_t global_batch, int64_t eval_interval,
                                           int64_t eval_iters);

// BlendedDataset: weights normalised; item s comes from the dataset k maximising
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
