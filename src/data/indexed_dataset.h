// Megatron's indexed dataset, "MMIDIDX" (docs/spec/indexed_dataset.md): PREFIX.idx (header, sequence lengths, byte
// pointers, document indices) and PREFIX.bin (the tokens of every sequence, back to back), little
// endian, no padding. The reader memory-maps both files and validates every field; the writer
// builds them and publishes them atomically (temporary files, fsync, rename).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/sequence_source.h"

namespace hytra {

class AtomicFile;

// dtype codes of the .idx header (docs/spec/indexed_dataset.md §3).
enum class TokenDtype : uint8_t { U8 = 1, I8 = 2, I16 = 3, I32 = 4, I64 = 5, F64 = 6, F32 = 7, U16 = 8 };
size_t token_dtype_size(TokenDtype t);
// uint16 when the vocabulary fits (< 65500), else int32 (Megatron's DType.optimal_dtype).
TokenDtype optimal_token_dtype(int64_t vocab_size);

class IndexedDataset : public SequenceSource {
 public:
  // Opens PREFIX.idx and PREFIX.bin; throws hytra::Error naming the file and the bad field.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  TokenDtype dtype() const { return dtype_; }
  int64_t num_sequences() const override { return num_sequences_; }
  int64_t num_documents() const { return int64_t(document_indices_.size()) - 1; }
  int64_t sequence_length(int64_t i) const override { return lengths_[size_t(i)]; }
  const std::vector<int64_t>& document_indices() const { return document_indices_; }
  int64_t num_tokens() const { return num_tokens_; }
  // Tokens outside int32 (int64 and float dtypes) saturate to INT32_MIN / INT32_MAX (NaN: INT32_MIN),
  // so a vocabulary check still sees them.
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const override;
  std::string name() const override { return prefix_ + ".bin"; }
  std::vector<int32_t> sequence(int64_t i) const;
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  TokenDtype dtype_ = TokenDtype::U16;
  int64_t num_sequences_ = 0, num_tokens_ = 0;
  std::vector<int64_t> lengths_;   // tokens per sequence (copied: the .idx arrays are unaligned)
  std::vector<int64_t> pointers_;  // byte offset of each sequence in .bin
  std::vector<int64_t> document_indices_;
  const unsigned char* bin_ = nullptr;  // the mapped .bin
  size_t bin_size_ = 0;
};

class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, TokenDtype dtype);
  ~IndexedDatasetWriter();  // the temporary files go away if finalize() did not run (core/atomic_file.h)
  // One document of one or more sequences (sentence_lengths sum to tokens.size(); empty = one
  // sequence holding all tokens; an empty document adds no sequence, only a boundary).
  void add_document(const std::vector<int32_t>& tokens, const std::vector<int64_t>& sentence_lengths = {});
  // Appends every document of another dataset (Megatron's add_index, used to merge partitions).
  void add_index(const IndexedDataset& other);
  // Publishes PREFIX.bin, then writes PREFIX.idx (both durably, core/atomic_file.h).
  void finalize();

 private:
  void write_tokens(const int32_t* tokens, int64_t n);
  std::string prefix_;
  TokenDtype dtype_;
  std::unique_ptr<AtomicFile> bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_{0};
  bool done_ = false;
};

}  // namespace hytra
