// SentencePiece's encoding of text to ids, as SentencePieceProcessor::EncodeAsIds gives them (docs/spec/tokenizers.md
// §10.3-10.5): normalize, segment by the model (BPE merges by score; Unigram's best-scoring segmentation; CHAR), then
// unknown pieces as byte pieces (byte_fallback) or one UNKNOWN id per run of them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/tokenizer/sentencepiece_model.h"
#include "data/tokenizer/sentencepiece_normalizer.h"

namespace hytra {

class SpEncoder {
 public:
  SpEncoder(const SpModelProto& m, const std::string& where);  // WORD models are refused, naming `where`
  std::vector<int32_t> encode(std::string_view text) const;
  const SpVocabulary& vocab() const { return vocab_; }
  // SentencePiece's bos_id() / eos_id() / pad_id(): the CONTROL piece of that text, else -1.
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  // The text of ids (pieces joined, "▁" as spaces, byte pieces as their bytes, control pieces dropped).
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  using Pieces = std::vector<std::pair<std::string, int32_t>>;  // (piece text, id)
  Pieces segment_bpe(std::string_view t) const;
  Pieces segment_unigram(std::string_view t) const;
  Pieces segment_char(std::string_view t) const;
  // One symbol of the initial segmentation at `t`: a user-defined piece (frozen) or one character.
  size_t symbol_length(std::string_view t, bool& frozen) const;

  // A byte trie of the NORMAL, USER_DEFINED and UNUSED pieces (Unigram's prefix search): node -> child per byte.
  struct TrieNode {
    int32_t id = -1;
  };
  std::vector<TrieNode> trie_;
  std::unordered_map<uint64_t, uint32_t> trie_edges_;  // (node << 8 | byte) -> child node
  void build_trie();

  SpModelType model_type_;
  bool byte_fallback_;
  bool add_dummy_prefix_;  // a "▁" before the text (decode drops it)
  std::string where_;
  SpVocabulary vocab_;
  SpNormalizer normalizer_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
  float min_score_ = 0, max_score_ = 0;  // over NORMAL pieces (Unigram)
};

}  // namespace hytra
