// `hytra inspect-data`: either one dataset's files (`PREFIX [--show N]`: dtype, counts, the first
// documents) or the samples training would see (`--data-path ... --split --seq-length --seed
// [--num-samples T V E] --show-samples K`, as JSON: each split's `len` and first `samples`).
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/flag_table.h"
#include "cli/flags.h"
#include "commands.h"
#include "core/error.h"
#include "data/gpt_data.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"

namespace hytra {
namespace {

void print_ids(std::ostream& os, const std::vector<int32_t>& ids) {
  os << "[";
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? ", " : "") << ids[i];
  os << "]";
}

}  // namespace

int cmd_inspect_data(int argc, char** argv) {
  std::vector<std::string> data_path, num_samples_text;
  std::string split = "969, 30, 1", cache_dir;
  int64_t seq_length = 0, seed = 1234, show = 0, show_samples = 0;
  TokenizerConfig tc;
  FlagTable t("PREFIX");
  using K = FlagSpec::Kind;
  t.add("--show", K::Int, "0", "print the first N documents of PREFIX", store(show));
  t.add("--data-path", K::StringList, "None", "PREFIX or W1 PREFIX1 W2 PREFIX2 ... (sample mode)", store(data_path));
  t.add("--split", K::String, "969, 30, 1", "train, valid, test proportions", store(split));
  t.add("--data-cache-path", K::String, "beside the data", "directory of the sampling index caches", store(cache_dir));
  t.add("--seq-length", K::Int, "None", "sequence length (samples hold seq-length + 1 tokens)", store(seq_length));
  t.add("--seed", K::Int, "1234", "shuffle seed", store(seed));
  t.add("--num-samples", K::StringList, "one epoch each", "samples asked of train, valid, test", store(num_samples_text));
  t.add("--show-samples", K::Int, "0", "samples to print per split", store(show_samples));
  add_tokenizer_flags(t, tc);  // (with --show: also print the text)
  t.add("--vocab-size", K::Int, "None",
        "NullTokenizer's vocabulary without the end of document; TikTokenizer's whole vocabulary",
        store(tc.vocab_size));
  FlagTable::Result r = t.parse(std::vector<std::string>(argv + 1, argv + argc));
  if (r.help) {
    std::cout << t.help_text("hytra inspect-data PREFIX [--show N] | --data-path P --seq-length L ...");
    return 0;
  }
  if (data_path.empty()) {
    if (r.positionals.size() != 1) throw Error("expected one dataset PREFIX (or --data-path for samples)");
    IndexedDataset d(r.positionals[0]);
    std::cout << "dataset: " << d.prefix() << "\ndtype code: " << int(d.dtype()) << "\ndocuments: " << d.num_documents()
              << "\nsequences: " << d.num_sequences() << "\ntokens: " << d.num_tokens() << "\n";
    std::unique_ptr<Tokenizer> tok;
    if (!tc.type.empty()) tok = load_tokenizer(tc);
    for (int64_t doc = 0; doc < std::min<int64_t>(show, d.num_documents()); ++doc) {
      std::vector<int32_t> ids;
      for (int64_t s = d.document_indices()[size_t(doc)]; s < d.document_indices()[size_t(doc) + 1]; ++s) {
        std::vector<int32_t> seq = d.sequence(s);
        ids.insert(ids.end(), seq.begin(), seq.end());
      }
      std::cout << "document " << doc << ": ";
      print_ids(std::cout, ids);
      std::cout << "\n";
      if (tok) std::cout << "text " << doc << ": " << tok->decode(ids) << "\n";
    }
    return 0;
  }
  if (seq_length <= 0) throw Error("--seq-length: required (a positive integer) with --data-path");
  std::array<std::optional<int64_t>, 3> counts;
  if (!num_samples_text.empty()) {
    if (num_samples_text.size() != 3) throw Error("--num-samples: expected three counts (train valid test)");
    for (size_t k = 0; k < 3; ++k) {
      counts[k] = parse_int_value("--num-samples", num_samples_text[k]);
      HYTRA_CHECK(*counts[k] >= 0, "--num-samples: expected counts >= 0, got ", *counts[k]);
    }
  }
  HYTRA_CHECK(seed >= 0 && seed <= UINT32_MAX, "--seed: expected 0..", UINT32_MAX,
              " (the shuffle is numpy's RandomState, as in Megatron), got ", seed);
  const auto splits = build_gpt_splits(data_path, split, seq_length, uint32_t(seed), counts, cache_dir);
  const char* names[3] = {"train", "valid", "test"};
  std::cout << "{\n";
  for (size_t k = 0; k < 3; ++k) {
    std::cout << "  \"" << names[k] << "\": {\"len\": " << splits[k].size << ", \"samples\": [";
    for (int64_t i = 0; i < std::min(show_samples, splits[k].size); ++i) {
      std::cout << (i ? ", " : "");
      print_ids(std::cout, splits[k].data->sample(i));
    }
    std::cout << "]}" << (k < 2 ? "," : "") << "\n";
  }
  std::cout << "}\n";
  return 0;
}

}  // namespace hytra
