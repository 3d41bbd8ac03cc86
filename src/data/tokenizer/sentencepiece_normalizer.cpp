#include "data/tokenizer/sentencepiece_normalizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"

namespace hytra {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// darts-clone's unit fields.
bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
uint32_t value_of(uint32_t u) { return u & 0x7FFFFFFFu; }
uint32_t label_of(uint32_t u) { return u & 0x800000FFu; }
uint32_t offset_of(uint32_t u) { return (u >> 10) << ((u & 0x200u) >> 6); }

// The length of the valid UTF-8 character starting `s` (SentencePiece's DecodeUTF8 rules, Unicode's
// well-formedness: no overlong forms, no surrogates, at most U+10FFFF; a U+FFFD in the text is valid), or 0.
size_t valid_char_length(std::string_view s) {
  char32_t cp;
  const int n = utf8_step(s, 0, cp);
  return n > 0 ? size_t(n) : 0;
}

}  // namespace

SpNormalizer::SpNormalizer(const SpModelProto& m, const std::vector<std::string>& user_defined,
                           const std::string& where)
    : user_defined_(user_defined),
      add_dummy_prefix_(m.add_dummy_prefix),
      remove_extra_whitespaces_(m.remove_extra_whitespaces),
      escape_whitespaces_(m.escape_whitespaces),
      suffix_(m.treat_whitespace_as_suffix),
      where_(where) {
  for (const std::string& u : user_defined_) user_defined_max_ = std::max(user_defined_max_, u.size());
  const std::string& blob = m.precompiled_charsmap;
  if (blob.empty()) return;  // identity
  // [uint32 trie bytes, little-endian][the double array][the pool]
  HYTRA_CHECK(blob.size() > 4, where, ": normalizer_spec.precompiled_charsmap has ", blob.size(),
              " bytes; expected more than 4");
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = trie_bytes << 8 | uint8_t(blob[size_t(i)]);
  HYTRA_CHECK(trie_bytes % 4 == 0 && trie_bytes > 0 && size_t(trie_bytes) <= blob.size() - 4, where,
              ": normalizer_spec.precompiled_charsmap: a trie of ", trie_bytes, " bytes does not fit its ",
              blob.size() - 4, " bytes");
  units_.resize(trie_bytes / 4);
  for (size_t u = 0; u < units_.size(); ++u) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | uint8_t(blob[4 + 4 * u + size_t(i)]);
    units_[u] = v;
  }
  pool_ = blob.substr(4 + trie_bytes);
}

size_t SpNormalizer::user_defined_prefix(std::string_view text) const {
  size_t best = 0;
  for (const std::string& u : user_defined_)
    if (u.size() > best && text.substr(0, u.size()) == u) best = u.size();
  return best;
}

size_t SpNormalizer::charsmap_match(std::string_view text, std::string_view& replacement) const {
  if (units_.empty()) return 0;
  size_t best = 0;
  uint32_t best_value = 0;
  size_t pos = offset_of(units_[0]);
  for (size_t i = 0; i < text.size(); ++i) {
    const uint32_t c = uint8_t(text[i]);
    pos ^= c;
    if (pos >= units_.size()) break;
    const uint32_t u = units_[pos];
    if (label_of(u) != c) break;
    pos ^= offset_of(u);
    if (pos >= units_.size()) break;
    if (has_leaf(u)) {
      best = i + 1;
      best_value = value_of(units_[pos]);
    }
  }
  if (best == 0) return 0;
  HYTRA_CHECK(best_value < pool_.size(), where_, ": normalizer_spec.precompiled_charsmap: a replacement at offset ",
              best_value, " is past the pool's ", pool_.size(), " bytes");
  const size_t end = pool_.find('\0', best_value);
  HYTRA_CHECK(end != std::string_view::npos, where_,
              ": normalizer_spec.precompiled_charsmap: the replacement at offset ", best_value, " has no NUL end");
  replacement = std::string_view(pool_).substr(best_value, end - best_value);
  return best;
}

std::string_view SpNormalizer::normalize_prefix(std::string_view rest, size_t& consumed) const {
  if (user_defined_max_ > 0) {
    if (const size_t n = user_defined_prefix(rest); n > 0) {
      consumed = n;
      return rest.substr(0, n);
    }
  }
  std::string_view replacement;
  if (const size_t n = charsmap_match(rest, replacement); n > 0) {
    consumed = n;
    return replacement;
  }
  if (const size_t n = valid_char_length(rest); n > 0) {
    consumed = n;
    return rest.substr(0, n);
  }
  consumed = 1;
  return kReplacement;
}

std::string SpNormalizer::normalize(std::string_view input) const {
  std::string out;
  if (input.empty()) return out;
  const std::string_view space = escape_whitespaces_ ? kSpaceSymbol : std::string_view(" ");
  size_t at = 0, n = 0;
  if (remove_extra_whitespaces_) {  // leading spaces
    while (at < input.size() && normalize_prefix(input.substr(at), n) == " ") at += n;
  }
  if (at == input.size()) return out;
  if (add_dummy_prefix_ && !suffix_) out += space;
  bool prev_space = remove_extra_whitespaces_;
  while (at < input.size()) {
    std::string_view s = normalize_prefix(input.substr(at), n);
    if (prev_space) {
      while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    }
    if (!s.empty()) {
      for (char c : s) {
        if (c == ' ' && escape_whitespaces_)
          out += kSpaceSymbol;
        else
          out += c;
      }
      prev_space = s.back() == ' ';
    }
    at += n;
    if (!remove_extra_whitespaces_) prev_space = false;
  }
  if (remove_extra_whitespaces_) {  // trailing spaces
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  }
  if (add_dummy_prefix_ && suffix_) out += space;
  return out;
}

}  // namespace hytra
