// Megatron's TikTokenizer (CustomTikTokenizer; docs/spec/tokenizers.md §9): byte-level BPE by ranks, as tiktoken's
// encode_ordinary, over a NeMo-style vocabulary file: a JSON list of {"rank", "token_bytes" (base64), "token_str"},
// rank i at index i, ranks 0-255 the single bytes 0-255. --tiktoken-num-special-tokens ids come first
// (--tiktoken-special-tokens, default <unk> <s> </s>, then <SPECIAL_k> up to the count); token ids are rank + that
// count, and the vocabulary is --vocab-size (default 2^17), the file cut to its first vocab-size - count ranks.
// Pre-tokenizer: Megatron's pattern "v1" or "v2" (unicode_regex.h). End of document: </s>.
#pragma once
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/unicode_regex.h"

namespace hytra {

struct TikTokenConfig {
  std::string path;                         // --tokenizer-model: the JSON vocabulary
  std::string pattern;                      // --tiktoken-pattern: v1 | v2
  int64_t vocab_size = 0;                   // --vocab-size (0: 2^17)
  int64_t num_special_tokens = 1000;        // --tiktoken-num-special-tokens
  std::vector<std::string> special_tokens;  // --tiktoken-special-tokens (empty: <unk> <s> </s>)
};

class TikTokenizer final : public Tokenizer {
 public:
  explicit TikTokenizer(const TikTokenConfig& cfg);  // errors name the flag or the file and entry

  std::vector<int32_t> encode(std::string_view utf8) const override;   // no special tokens parsed, as Megatron
  std::string decode(const std::vector<int32_t>& ids) const override;  // invalid UTF-8 as U+FFFD
  std::string decode_bytes(const std::vector<int32_t>& ids) const;     // the tokens' bytes
  int32_t eod() const override { return eos_; }
  int64_t vocab_size() const override { return vocab_size_; }

  // The ids of one pre-token (tiktoken's byte_pair_encode: the lowest-rank adjacent pair merged first, the
  // leftmost on ties), offset by the special tokens.
  std::vector<int32_t> encode_piece(std::string_view piece) const;
  static const char* pattern_text(const std::string& name);  // Megatron's v1 / v2 patterns; nullptr otherwise

 private:
  int32_t rank_of(std::string_view bytes) const;  // -1 when not a token
  std::unordered_map<std::string, int32_t> ranks_;
  std::vector<std::string> special_texts_;  // the given special tokens (ids 0, 1, ...)
  std::vector<std::string> id_bytes_;       // bytes of each rank (id = rank + the special-token count)
  UnicodeRegex pattern_;
  int64_t vocab_size_ = 0, num_special_ = 0;
  int32_t eos_ = -1;
};

}  // namespace hytra
