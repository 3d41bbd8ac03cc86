#include "data/gpt_data.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

namespace hytra {
namespace {

struct Weighted {
  double weight;
  std::string prefix;
};

std::vector<Weighted> parse_data_path(const std::vector<std::string>& path) {
  HYTRA_CHECK(!path.empty(), "--data-path: expected PREFIX or W1 PREFIX1 W2 PREFIX2 ...");
  if (path.size() == 1) return {{1.0, path[0]}};
  HYTRA_CHECK(path.size() % 2 == 0, "--data-path: expected weight/prefix pairs, got ", path.size(), " values");
  std::vector<Weighted> out;
  for (size_t i = 0; i < path.size(); i += 2) {
    char* end = nullptr;
    const double w = std::strtod(path[i].c_str(), &end);
    HYTRA_CHECK(end != path[i].c_str() && *end == '\0' && std::isfinite(w) && w >= 0,
                "--data-path: expected a finite non-negative weight before '", path[i + 1], "', got '", path[i], "'");
    out.push_back({w, path[i + 1]});
  }
  double total = 0;
  for (const auto& p : out) total += p.weight;
  HYTRA_CHECK(total > 0, "--data-path: the blend weights are all zero (give at least one dataset a positive weight)");
  HYTRA_CHECK(std::isfinite(total), "--data-path: the weights must have a positive finite sum, got ", total);
  return out;
}

}  // namespace

std::array<DataSplit, 3> build_gpt_splits(const std::vector<std::string>& data_path, const std::string& split,
                                          int64_t seq_length, uint32_t seed,
                                          const std::array<std::optional<int64_t>, 3>& num_samples,
                                          const std::string& cache_dir, int64_t vocab_size) {
  static const char* kSplitNames[3] = {"train", "valid", "test"};
  auto cache_for = [&](const std::string& prefix, size_t k) {
    const std::string dir = !cache_dir.empty() ? cache_dir
                            : std::filesystem::path(prefix).has_parent_path()
                                ? (std::filesystem::path(prefix).parent_path() / "cache/GPTDataset_indices").string()
                                : std::string("cache/GPTDataset_indices");
    return IndexCache{dir, prefix, kSplitNames[k]};
  };
  const std::vector<Weighted> parts = parse_data_path(data_path);
  std::vector<std::shared_ptr<const IndexedDataset>> sources;
  std::vector<double> weights;
  for (const auto& p : parts) {
    sources.push_back(std::make_shared<IndexedDataset>(p.prefix));
    weights.push_back(p.weight);
  }
  std::array<DataSplit, 3> out;
  for (size_t k = 0; k < 3; ++k) {
    // A zero --split weight leaves split k empty for every prefix alike.
    if (!split_ranges(split, sources[0]->num_sequences())[k]) continue;
    if (parts.size() == 1) {
      const auto range = split_ranges(split, sources[0]->num_sequences())[k];
      auto ds = std::make_shared<GptDataset>(sources[0], *range, seq_length, num_samples[k], seed,
                                             cache_for(parts[0].prefix, k), vocab_size);
      out[k] = {ds, ds->size()};
      continue;
    }
    HYTRA_CHECK(num_samples[k].has_value(), "--data-path: a blend of datasets needs sample counts per split");
    const int64_t n = *num_samples[k];
    const std::vector<int64_t> sizes = BlendedDataset::per_dataset_sizes(weights, n);
    std::vector<std::shared_ptr<const SampleSource>> members;
    for (size_t d = 0; d < sources.size(); ++d) {
      const auto range = split_ranges(split, sources[d]->num_sequences())[k];
      members.push_back(std::make_shared<GptDataset>(sources[d], *range, seq_length, sizes[d], seed,
                                                     cache_for(parts[d].prefix, k), vocab_size));
    }
    out[k] = {std::make_shared<BlendedDataset>(members, weights, n), n};
  }
  return out;
}

}  // namespace hytra
