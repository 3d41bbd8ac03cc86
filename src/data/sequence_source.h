// SequenceSource: the token sequences of a Megatron indexed dataset (.bin/.idx), as GPTDataset
// sees them: a count, each sequence's length, and reads of token ranges.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hytra {

class SequenceSource {
 public:
  virtual ~SequenceSource() = default;
  virtual int64_t num_sequences() const = 0;
  virtual int64_t sequence_length(int64_t i) const = 0;
  // out[0 .. count) = tokens [offset, offset + count) of sequence `seq`.
  virtual void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const = 0;
  // Where the tokens live, for error messages (PREFIX.bin).
  virtual std::string name() const = 0;
};

// Sequences held in memory (tests, small tools).
class InMemorySequences : public SequenceSource {
 public:
  explicit InMemorySequences(std::vector<std::vector<int32_t>> seqs) : seqs_(std::move(seqs)) {}
  int64_t num_sequences() const override { return int64_t(seqs_.size()); }
  int64_t sequence_length(int64_t i) const override { return int64_t(seqs_[size_t(i)].size()); }
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const override {
    for (int64_t k = 0; k < count; ++k) out[k] = seqs_[size_t(seq)][size_t(offset + k)];
  }
  std::string name() const override { return "in-memory sequences"; }

 private:
  std::vector<std::vector<int32_t>> seqs_;
};

}  // namespace hytra
