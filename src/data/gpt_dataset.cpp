#include "data/gpt_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <regex>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/index_cache.h"
#include "data/mt19937.h"

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

EpochPlan plan_epochs(const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                      std::optional<int64_t> num_samples) {
  HYTRA_CHECK(seq_length > 0, "--seq-length: expected a positive integer, got ", seq_length);
  constexpr int64_t kExtra = 1;  // add_extra_token_to_sequence: samples hold seq_length + 1 tokens
  EpochPlan plan;
  for (int64_t s = range.begin; s < range.end; ++s) plan.tokens_per_epoch += lengths[size_t(s)];
  const int64_t T = plan.tokens_per_epoch;
  if (T == 0) return plan;  // docs/spec/README.md decision 8: Megatron would loop forever counting epochs
  if (num_samples) {
    int64_t tokens = T;
    while (tokens < *num_samples * seq_length + kExtra) {
      tokens += T;
      plan.num_epochs++;
    }
  }
  if (plan.num_epochs > 1) {
    plan.sans_final = ((plan.num_epochs - 1) * T - kExtra) / seq_length;
    const int64_t from_final = *num_samples - plan.sans_final;
    const int64_t per_epoch = (T - kExtra) / seq_length;
    plan.separate_final_epoch = from_final < int64_t(0.80 * double(per_epoch));
  }
  plan.num_samples = (plan.num_epochs * T - kExtra) / seq_length;
  return plan;
}

GptIndices build_gpt_indices(const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                             std::optional<int64_t> num_samples, uint32_t seed) {
  const EpochPlan plan = plan_epochs(lengths, range, seq_length, num_samples);
  GptIndices idx;
  if (plan.tokens_per_epoch == 0) {
    HYTRA_CHECK(!num_samples || *num_samples == 0, "--split: the split of sequences [", range.begin, ", ", range.end,
                ") holds no tokens but ", *num_samples, " samples were asked of it");
    return idx;
  }
  idx.num_epochs = plan.num_epochs;
  idx.separate_final_epoch = plan.separate_final_epoch;
  // Progress: the document index, the sample index, the shuffle index.
  ProgressBar bar("index of sequences [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ")", 3,
                  info_file(), 0.1, kPlainProgressSeconds);
  RandomState rng(seed);
  if (idx.separate_final_epoch) {
    append_document_index(idx.document_index, range, idx.num_epochs - 1, rng);
    append_document_index(idx.document_index, range, 1, rng);
  } else {
    append_document_index(idx.document_index, range, idx.num_epochs, rng);
  }

  bar.update(1);
  idx.sample_index =
      build_sample_index(lengths, idx.document_index, seq_length, idx.num_epochs * plan.tokens_per_epoch);
  bar.update(2);
  const int64_t n = int64_t(idx.sample_index.size()) / 2 - 1;
  if (idx.separate_final_epoch) {
    append_shuffled_range(idx.shuffle_index, 0, plan.sans_final, rng);
    append_shuffled_range(idx.shuffle_index, plan.sans_final, n, rng);
  } else {
    append_shuffled_range(idx.shuffle_index, 0, n, rng);
  }
  return idx;
}

GptDataset::GptDataset(std::shared_ptr<const SequenceSource> source, SplitRange range, int64_t seq_length,
                       std::optional<int64_t> num_samples, uint32_t seed, const std::optional<IndexCache>& cache,
                       int64_t vocab_size)
    : source_(std::move(source)), seq_length_(seq_length), vocab_size_(vocab_size) {
  std::vector<int64_t> lengths(size_t(source_->num_sequences()));
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = source_->sequence_length(int64_t(i));
  const EpochPlan plan = plan_epochs(lengths, range, seq_length, num_samples);
  if (!cache || plan.tokens_per_epoch == 0) {  // an empty split has nothing worth caching
    idx_ = build_gpt_indices(lengths, range, seq_length, num_samples, seed);
    return;
  }
  const std::string description = cache_description(*cache, range, seq_length, num_samples, seed);
  const std::string base = cache_base(*cache, description);
  CacheRead r = read_index_cache(base, description, lengths, range, seq_length, plan);
  if (r.indices) {
    idx_ = std::move(*r.indices);
    from_cache_ = true;
    return;
  }
  idx_ = build_gpt_indices(lengths, range, seq_length, num_samples, seed);
  if (!r.problem.empty()) log_warn(r.problem + "; rebuilding the index cache");
  try {
    write_index_cache(base, description, idx_, lengths);
  } catch (const Error& e) {
    if (r.problem.empty()) throw;
    fail(str(r.problem, "; the cache cannot be rebuilt (", e.what(), "): delete ", base,
             "* or pass a writable --data-cache-path"));
  }
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
    if (vocab_size_ > 0) check_vocabulary(out.data() + filled, stop - offset, seq, offset, i);
    filled += stop - offset;
  }
  HYTRA_ASSERT(filled == seq_length_ + 1, "sample ", i, " has ", filled, " tokens");
  return out;
}

void GptDataset::check_vocabulary(const int32_t* tokens, int64_t count, int64_t seq, int64_t offset,
                                  int64_t item) const {
  for (int64_t k = 0; k < count; ++k) {
    if (tokens[k] >= 0 && tokens[k] < vocab_size_) continue;
    // Megatron would index its embedding out of range; hytra's padded rows would train silently.
    fail(str(source_->name(), ": token ", tokens[k], " (sequence ", seq, ", token ", offset + k, "; dataset item ",
             item, ", sample ", idx_.shuffle_index[size_t(item)], ") is outside the vocabulary [0, ", vocab_size_,
             "): the data was tokenized with another vocabulary than --tokenizer-type/--vocab-file (or --vocab-size) "
             "give"));
  }
}

namespace {

double checked_weight_sum(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) {
    HYTRA_CHECK(std::isfinite(w) && w >= 0, "--data-path: blend weight ", w, " is not a finite non-negative number");
    total += w;
  }
  HYTRA_CHECK(total > 0, "--data-path: the blend weights are all zero (give at least one dataset a positive weight)");
  return total;
}

}  // namespace

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
  const double total = checked_weight_sum(weights);
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
  const double total = checked_weight_sum(weights);
  std::vector<int64_t> out;
  for (double w : weights) out.push_back(int64_t(std::ceil(std::ceil(double(size) * (w / total)) * 1.005)));
  return out;
}

}  // namespace hytra
