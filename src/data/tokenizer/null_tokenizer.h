// Megatron's NullTokenizer (megatron/training/tokenizer): the text is already token ids separated by single spaces
// ("17 4 203"); --vocab-size N gives ids 0..N-1, the end-of-document id is N, and the vocabulary N + 1.
#pragma once
#include "data/tokenizer/tokenizer.h"

namespace hytra {

class NullTokenizer final : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size);  // errors name --vocab-size
  // Python's int() of each piece of text.split(" "): optional surrounding whitespace and sign, decimal digits
  // (underscores between digits allowed); an empty piece (a doubled or an edge space) or an id outside [0, N]
  // is an error naming the piece.
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;  // the ids joined by single spaces
  int32_t eod() const override { return int32_t(vocab_); }
  int64_t vocab_size() const override { return vocab_ + 1; }

 private:
  int64_t vocab_;
};

}  // namespace hytra
