// The GPTDataset index cache on disk (docs/spec/gpt_dataset.md §11): reading it back only after checking it
// describes this dataset, and writing it so the next run can check it.
//
// Files, in the cache directory, named by the md5 of the description as Megatron names them:
//   {base}description.txt, {base}document_index.npy, {base}sample_index.npy, {base}shuffle_index.npy
// and hytra's sidecar {base}hytra_checksums.txt: a 64-bit checksum of every sequence length of the
// dataset (the fingerprint of PREFIX.idx: the indices depend on nothing else of it) and of each
// .npy array's shape and values. Megatron ignores the sidecar, so it can still read the cache.
//
// Rules when {base}description.txt exists:
//  - every cache is validated against the dataset, sidecar or not: the description text, the
//    shapes (document_index E x split size, sample_index (n+1, 2), shuffle_index n), every value
//    (each split sequence id E times in document_index; sample rows inside document_index, offsets
//    inside their sequence and each sample exactly seq_length+1 tokens on; shuffle_index a
//    permutation of [0, n), the final epoch last when separate);
//  - with the sidecar (hytra wrote it), a different sequence-length fingerprint (the dataset was
//    re-preprocessed into the same prefix) or array checksum (a modified .npy) rejects the cache;
//  - without it (Megatron, or hytra before the sidecar), values that pass the checks are trusted.
// A rejected cache is rebuilt and rewritten with a warning naming the stale file; if it cannot be
// rewritten (read-only directory), that is an error naming the stale file and the way out.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace hytra {

// Megatron's description (hytra's own flavour of it) and the path prefix of its cache files.
std::string cache_description(const IndexCache& c, SplitRange range, int64_t seq_length,
                              std::optional<int64_t> num_samples, uint32_t seed);
std::string cache_base(const IndexCache& c, const std::string& description);

struct CacheRead {
  std::optional<GptIndices> indices;  // the validated cache, or none
  std::string problem;                // why an existing cache was rejected ("" = no cache)
};

// lengths: every sequence of the dataset; plan: the split's epochs (for the expected shapes).
CacheRead read_index_cache(const std::string& base, const std::string& description,
                           const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                           const EpochPlan& plan);

// Writes the arrays, then the sidecar, then the description (which marks a complete cache); each
// file atomically. Throws hytra::Error naming the file that could not be written.
void write_index_cache(const std::string& base, const std::string& description, const GptIndices& idx,
                       const std::vector<int64_t>& lengths);

}  // namespace hytra
