// Megatron's SentencePiece tokenizers over a .model file (--tokenizer-model; docs/spec/tokenizers.md §10.6):
//  - GPTSentencePieceTokenizer: SentencePiece's ids of the text; end of document: the model's eos piece.
//  - SentencePieceTokenizer and Llama2Tokenizer: the same, as Megatron's current tokenizer library builds them; with
//    --legacy-tokenizer, as its legacy classes: SentencePieceTokenizer appends <CLS> <SEP> <EOD> <MASK> (and <PAD>,
//    <BOS>, <EOS> where the model has no such control piece) after the model's pieces, cuts the text at their
//    occurrences and ends documents with <EOD>; Llama2Tokenizer puts the bos id before each text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer/sentencepiece_encode.h"
#include "data/tokenizer/tokenizer.h"

namespace hytra {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  enum class Flavor { Plain, LegacySentencePiece, LegacyLlama2 };
  SentencePieceTokenizer(const std::string& model_path, Flavor flavor);

  std::vector<int32_t> encode(std::string_view utf8) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int32_t eod() const override { return eod_; }
  int64_t vocab_size() const override { return encoder_.vocab().size() + appended_; }
  const SpEncoder& encoder() const { return encoder_; }

 private:
  SpEncoder encoder_;
  Flavor flavor_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // LegacySentencePiece: text -> id, Megatron's order
  int64_t appended_ = 0;                                   // specials past the model's pieces
  int32_t eod_ = -1;
};

}  // namespace hytra
