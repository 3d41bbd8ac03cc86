// Gpt2Bpe encode/decode (docs/spec/tokenizers.md §4): pre-tokens -> bytes -> byte-alphabet symbols -> rank-ordered
// merges -> ids, with a per-word cache.
#include "data/tokenizer/gpt2_bpe.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/pretokenize.h"

namespace hytra {
namespace {

constexpr size_t kMaxCacheEntries = size_t(1) << 18;

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

int32_t Gpt2Bpe::token_id(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  return it == token_to_id_.end() ? -1 : it->second;
}

void Gpt2Bpe::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = token_to_id_.find(bytes_to_alphabet(word));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(word[i])];
  while (sym.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    Merge best{};
    int32_t first = -1, second = -1;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges_.find(pair_key(sym[i], sym[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = it->second;
        first = sym[i];
        second = sym[i + 1];
      }
    }
    if (first < 0) break;
    size_t w = 0;
    for (size_t i = 0; i < sym.size();) {
      if (i + 1 < sym.size() && sym[i] == first && sym[i + 1] == second) {
        sym[w++] = best.merged;
        i += 2;
      } else {
        sym[w++] = sym[i++];
      }
    }
    sym.resize(w);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void Gpt2Bpe::encode_into(std::string_view text, size_t base_offset, WordCache& cache,
                          std::vector<int32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string_view> words;
  gpt2_pretokenize(text, words, base_offset);
  for (std::string_view w : words) {
    auto it = cache.find(std::string(w));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    size_t before = out.size();
    bpe_word(w, out);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(w), std::vector<int32_t>(out.begin() + std::ptrdiff_t(before), out.end()));
  }
}

std::vector<int32_t> Gpt2Bpe::encode(std::string_view utf8) const {
  WordCache cache;
  std::vector<int32_t> out;
  encode_into(utf8, 0, cache, out);
  return out;
}

std::vector<int32_t> Gpt2Bpe::encode_with_special(std::string_view utf8) const {
  WordCache cache;
  std::vector<int32_t> out;
  size_t seg = 0;
  for (size_t i = 0; i < utf8.size();) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& s : specials_) {  // longest first
      if (utf8.compare(i, s.first.size(), s.first) == 0) {
        hit = &s;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_into(utf8.substr(seg, i - seg), seg, cache, out);
    out.push_back(hit->second);
    i += hit->first.size();
    seg = i;
  }
  encode_into(utf8.substr(seg), seg, cache, out);
  return out;
}

std::vector<std::vector<int32_t>> Gpt2Bpe::encode_batch(const std::vector<std::string>& docs) const {
  std::vector<std::vector<int32_t>> out(docs.size());
  parallel_for(int64_t(docs.size()), 1, [&](int64_t begin, int64_t end) {
    WordCache cache;
    for (int64_t d = begin; d < end; ++d) encode_into(docs[size_t(d)], 0, cache, out[size_t(d)]);
  });
  return out;
}

std::string Gpt2Bpe::decode_bytes(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    HYTRA_CHECK(id >= 0 && id < int32_t(id_to_bytes_.size()), "decode: token id ", id,
                " out of range [0, ", id_to_bytes_.size(), ")");
    out += id_to_bytes_[size_t(id)];
  }
  return out;
}

std::string Gpt2Bpe::decode(const std::vector<int32_t>& ids) const {
  return utf8_replace_invalid(decode_bytes(ids));
}

}  // namespace hytra
