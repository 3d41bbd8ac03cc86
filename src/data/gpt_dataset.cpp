#include "data/gpt_dataset.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>

#include "core/error.h"
#include "data/md5.h"
#include "data/mt19937.h"
#include "data/npy.h"

namespace hytra {

std::array<std::optional<SplitRange>, 3> split_ranges(const std::string& split, int64_t num_sequences) {
  // Megatron: numbers of the string (pattern [.0-9]+), padded to 3 with zeros, normalised; the
  // bookends are cumulative sums; split k exposes [round(lo * N), round(hi * N)) (half to even).
  std::vector<double> w;
  static const std::regex number("[.0-9]+");
  for (auto it = std::sregex_iterator(split.begin(), split.end(), number); it != std::sregex_iterator(); ++it) {
    try {
      w.push_back(std::stod(it->str()));
    } catch (const std::exception&) {
      fail(str("--split: '", it->str(), "' in '", split, "' is not a number"));
    }
  }
  HYTRA_CHECK(!w.empty() && w.size() <= 3, "--split: expected 1 to 3 non-negative numbers like 969,30,1, got '",
              split, "'");
  w.resize(3, 0.0);
  double total = 0;
  for (double x : w) total += x;
  HYTRA_CHECK(total > 0, "--split: the proportions of '", split, "' sum to zero");
  for (double& x : w) x /= total;
  std::array<std::optional<SplitRange>, 3> out;
  double lo = 0;
  for (int k = 0; k < 3; ++k) {
    const double hi = lo + w[size_t(k)];
    if (lo != hi)
      out[size_t(k)] = SplitRange{int64_t(std::nearbyint(lo * double(num_sequences))),
                                  int64_t(std::nearbyint(hi * double(num_sequences)))};
    lo = hi;
  }
  return out;
}

namespace {

// Epoch-major tile of the split's sequence ids, shuffled (Megatron's _build_document_index).
void append_document_index(std::vector<int32_t>& out, SplitRange range, int64_t epochs, RandomState& rng) {
  const size_t start = out.size();
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t s = range.begin; s < range.end; ++s) out.push_back(int32_t(s));
  rng.shuffle(out.data() + start, int64_t(out.size() - start));
}

// arange(first, last) shuffled, appended.
void append_shuffled_range(std::vector<int64_t>& out, int64_t first, int64_t last, RandomState& rng) {
  const size_t start = out.size();
  for (int64_t i = first; i < last; ++i) out.push_back(i);
  rng.shuffle(out.data() + start, int64_t(out.size() - start));
}

}  // namespace

std::vector<int64_t> build_sample_index(const std::vector<int64_t>& lengths, const std::vector<int32_t>& document_index,
                                        int64_t seq_length, int64_t num_tokens) {
  // Sample j spans stream tokens [j * L, j * L + L] of the documents concatenated in order.
  const int64_t n = (num_tokens - 1) / seq_length;
  std::vector<int64_t> rows;
  rows.reserve(size_t(2 * (n + 1)));
  rows.push_back(0);
  rows.push_back(0);
  int64_t doc_pos = 0, doc_offset = 0;
  for (int64_t j = 1; j <= n; ++j) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      const int64_t doc_length = lengths[size_t(document_index[size_t(doc_pos)])] - doc_offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        doc_offset += remaining + doc_length - 1;
        remaining = 0;
      } else {
        ++doc_pos;
        doc_offset = 0;
      }
    }
    rows.push_back(doc_pos);
    rows.push_back(doc_offset);
  }
  return rows;
}

GptIndices build_gpt_indices(const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                             std::optional<int64_t> num_samples, uint32_t seed) {
  HYTRA_CHECK(seq_length > 0, "--seq-length: expected a positive integer, got ", seq_length);
  constexpr int64_t kExtra = 1;  // add_extra_token_to_sequence: samples hold seq_length + 1 tokens
  int64_t tokens_per_epoch = 0;
  for (int64_t s = range.begin; s < range.end; ++s) tokens_per_epoch += lengths[size_t(s)];
  GptIndices idx;
  if (tokens_per_epoch == 0) {  // hytra decision 8: Megatron would loop forever counting epochs
    HYTRA_CHECK(!num_samples || *num_samples == 0, "--split: the split of sequences [", range.begin, ", ", range.end,
                ") holds no tokens but ", *num_samples, " samples were asked of it");
    return idx;
  }
  if (num_samples) {
    int64_t tokens = tokens_per_epoch;
    while (tokens < *num_samples * seq_length + kExtra) {
      tokens += tokens_per_epoch;
      idx.num_epochs++;
    }
  }
  int64_t sans_final = 0;
  if (idx.num_epochs > 1) {
    sans_final = ((idx.num_epochs - 1) * tokens_per_epoch - kExtra) / seq_length;
    const int64_t from_final = *num_samples - sans_final;
    const int64_t per_epoch = (tokens_per_epoch - kExtra) / seq_length;
    idx.separate_final_epoch = from_final < int64_t(0.80 * double(per_epoch));
  }
  RandomState rng(seed);
  if (idx.separate_final_epoch) {
    append_document_index(idx.document_index, range, idx.num_epochs - 1, rng);
    append_document_index(idx.document_index, range, 1, rng);
  } else {
    append_document_index(idx.document_index, range, idx.num_epochs, rng);
  }

  idx.sample_index = build_sample_index(lengths, idx.document_index, seq_length, idx.num_epochs * tokens_per_epoch);
  const int64_t n = int64_t(idx.sample_index.size()) / 2 - 1;
  if (idx.separate_final_epoch) {
    append_shuffled_range(idx.shuffle_index, 0, sans_final, rng);
    append_shuffled_range(idx.shuffle_index, sans_final, n, rng);
  } else {
    append_shuffled_range(idx.shuffle_index, 0, n, rng);
  }
  return idx;
}

namespace {

std::string description_of(const IndexCache& c, SplitRange range, int64_t seq_length, std::optional<int64_t> num_samples,
                           uint32_t seed) {
  std::string path;
  for (char ch : c.dataset_path) path += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return str("{\n    \"class\": \"GPTDataset\",\n    \"dataset_path\": \"", path, "\",\n    \"index_split\": \"",
             c.split_name, "\",\n    \"sequence_range\": [", range.begin, ", ", range.end, "],\n    \"num_samples\": ",
             num_samples ? std::to_string(*num_samples) : "null", ",\n    \"random_seed\": ", seed,
             ",\n    \"sequence_length\": ", seq_length, ",\n    \"add_extra_token_to_sequence\": true\n}");
}

bool file_exists(const std::string& p) { return std::ifstream(p).good(); }

std::vector<int64_t> as_vector(const NpyArray& a) { return a.values; }

}  // namespace

GptDataset::GptDataset(std::shared_ptr<const SequenceSource> source, SplitRange range, int64_t seq_length,
                       std::optional<int64_t> num_samples, uint32_t seed, const std::optional<IndexCache>& cache)
    : source_(std::move(source)), seq_length_(seq_length) {
  std::vector<int64_t> lengths(size_t(source_->num_sequences()));
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = source_->sequence_length(int64_t(i));
  std::string base, description;
  if (cache) {
    description = description_of(*cache, range, seq_length, num_samples, seed);
    base = cache->dir + "/" + md5_hex(description) + "-GPTDataset-" + cache->split_name + "-";
    if (file_exists(base + "description.txt")) {
      const NpyArray doc = read_npy(base + "document_index.npy");
      idx_.document_index.assign(doc.values.begin(), doc.values.end());
      idx_.sample_index = as_vector(read_npy(base + "sample_index.npy"));
      idx_.shuffle_index = as_vector(read_npy(base + "shuffle_index.npy"));
      HYTRA_CHECK(idx_.sample_index.size() == 2 * (idx_.shuffle_index.size() + 1) || idx_.shuffle_index.empty(),
                  base, "*.npy: the cached indices disagree; delete them to rebuild");
      from_cache_ = true;
      return;
    }
  }
  idx_ = build_gpt_indices(lengths, range, seq_length, num_samples, seed);
  if (!cache) return;
  std::filesystem::create_directories(cache->dir);
  const int64_t max_len = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  const bool small = std::max<int64_t>(int64_t(idx_.document_index.size()), max_len) <= INT32_MAX;
  const int64_t n = int64_t(idx_.shuffle_index.size());
  write_npy(base + "document_index.npy",
            {"<i4", {int64_t(idx_.document_index.size())},
             std::vector<int64_t>(idx_.document_index.begin(), idx_.document_index.end())});
  write_npy(base + "sample_index.npy", {small ? "<i4" : "<i8", {n + 1, 2}, idx_.sample_index});
  write_npy(base + "shuffle_index.npy", {n < int64_t(UINT32_MAX) - 1 ? "<u4" : "<i8", {n}, idx_.shuffle_index});
  std::ofstream(base + "description.txt.tmp") << description;  // written last: marks a complete cache
  std::filesystem::rename(base + "description.txt.tmp", base + "description.txt");
}

std::vector<int32_t> GptDataset::sample(int64_t i) const {
  HYTRA_CHECK(i >= 0 && i < size(), "dataset item ", i, " is out of range: the dataset has ", size(),
              " samples (ask for more with more --train-iters, or check --split)");
  const int64_t s = idx_.shuffle_index[size_t(i)];
  int64_t pos = idx_.sample_index[size_t(2 * s)], offset = idx_.sample_index[size_t(2 * s + 1)];
  const int64_t end_pos = idx_.sample_index[size_t(2 * s + 2)], end_offset = idx_.sample_index[size_t(2 * s + 3)];
  std::vector<int32_t> out(size_t(seq_length_ + 1));
  int64_t filled = 0;
  for (; pos <= end_pos; ++pos, offset = 0) {
    const int64_t seq = idx_.document_index[size_t(pos)];
    const int64_t stop = pos == end_pos ? end_offset + 1 : source_->sequence_length(seq);
    source_->read(seq, offset, stop - offset, out.data() + filled);
    filled += stop - offset;
  }
  HYTRA_ASSERT(filled == seq_length_ + 1, "sample ", i, " has ", filled, " tokens");
  return out;
}

std::array<int64_t, 3> split_sample_counts(int64_t train_iters, int64_t global_batch, int64_t eval_interval,
                                           int64_t eval_iters) {
  const int64_t evals = eval_interval > 0 ? train_iters / eval_interval + 1 : 1;
  return {train_iters * global_batch, evals * eval_iters * global_batch, eval_iters * global_batch};
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)) {
  HYTRA_CHECK(!datasets_.empty() && datasets_.size() == weights.size() && datasets_.size() < 32768,
              "--data-path: expected weight/prefix pairs");
  double total = 0;
  for (double w : weights) total += w;
  for (double& w : weights) w /= total;
  std::vector<int64_t> taken(weights.size(), 0);
  dataset_index_.resize(size_t(size));
  dataset_sample_index_.resize(size_t(size));
  for (int64_t s = 0; s < size; ++s) {
    const double at = std::max(double(s), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - double(taken[0]);
    for (size_t k = 1; k < weights.size(); ++k) {
      const double error = weights[k] * at - double(taken[k]);
      if (error > best_error) {
        best_error = error;
        best = k;
      }
    }
    dataset_index_[size_t(s)] = int16_t(best);
    dataset_sample_index_[size_t(s)] = taken[best]++;
  }
}

std::vector<int32_t> BlendedDataset::sample(int64_t i) const {
  HYTRA_CHECK(i >= 0 && i < size(), "blended dataset item ", i, " is out of range (", size(), " samples)");
  return datasets_[size_t(dataset_index_[size_t(i)])]->sample(dataset_sample_index_[size_t(i)]);
}

std::vector<int64_t> BlendedDataset::per_dataset_sizes(const std::vector<double>& weights, int64_t size) {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<int64_t> out;
  for (double w : weights) out.push_back(int64_t(std::ceil(std::ceil(double(size) * (w / total)) * 1.005)));
  return out;
}

}  // namespace hytra
