// SentencePiece's normalizer (docs/spec/tokenizers.md §10.2): the precompiled character map (a darts-clone double
// array of byte strings and a pool of their replacements), longest match first; user-defined pieces pass through as
// they are; a malformed UTF-8 byte becomes U+FFFD; then the whitespace rules (leading, repeated and trailing spaces
// removed), the dummy "▁" prefix (or suffix) and spaces escaped as "▁" (U+2581).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/sentencepiece_model.h"

namespace hytra {

class SpNormalizer {
 public:
  // Checks the charsmap's layout; errors name `where`.
  SpNormalizer(const SpModelProto& m, const std::vector<std::string>& user_defined, const std::string& where);
  std::string normalize(std::string_view input) const;

  // The longest user-defined piece that starts `text` (its length), or 0.
  size_t user_defined_prefix(std::string_view text) const;

 private:
  // One step over the raw input: the replacement text and how many input bytes it consumes.
  std::string_view normalize_prefix(std::string_view rest, size_t& consumed) const;
  // The longest charsmap key that starts `text` (its length, and its replacement), or 0.
  size_t charsmap_match(std::string_view text, std::string_view& replacement) const;

  std::vector<uint32_t> units_;  // the double array
  std::string pool_;             // NUL-terminated replacements
  std::vector<std::string> user_defined_;
  size_t user_defined_max_ = 0;
  bool add_dummy_prefix_, remove_extra_whitespaces_, escape_whitespaces_, suffix_;
  std::string where_;
};

}  // namespace hytra
