// Gpt2Bpe encode/decode (docs/spec/tokenizers.md §4): pre-tokens -> bytes -> byte-alphabet symbols -> rank-ordered
// merges -> ids, with a per-word cache.
#include "data/tokenizer/gpt2_bpe.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>

#include "core/error.h"
#include "core/thread_pool.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/pretokenize.h"

namespace hytra {
namespace {

constexpr size_t kMaxCacheEntries = size_t(1) << 18;
constexpr size_t kRescanMaxSymbols = 32;  // longer words merge through the queue (bench: crossover ~24-32)

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
  if (sym.size() <= kRescanMaxSymbols) {
    merge_by_rescan(sym);
  } else {
    merge_by_queue(sym);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

// Both merge loops follow the reference's rounds (GPT-2 encoder.py): each round takes the
// lowest-rank adjacent pair and merges all its non-overlapping occurrences left to right; pairs a
// round creates count from the next round on.

// The reference's own loop: it rescans the word every round (O(n^2)), and is still the fastest for
// short words (nearly all words: below kRescanMaxSymbols the queue's setup costs more).
void Gpt2Bpe::merge_by_rescan(std::vector<int32_t>& sym) const {
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
}

// O(n log n): the symbols form a linked list (prev/next indices; a merged symbol keeps its left
// index, so index order is text order) and a min-heap of ranks, each with the left indices of its
// pair's occurrences, gives the next round. A round takes its occurrences out before merging, so
// the pairs it creates (even one of a lower rank, in an odd table) wait for a later round. An
// occurrence is stale when its left node no longer holds the pair's left symbol or the next node
// its right one (a merged id differs from both parts: vocab ids are unique and the merged string is
// longer). A binary heap of every candidate pair took 8x longer on a 10 MB word (11 s, not 1.4 s):
// its pops miss the cache.
void Gpt2Bpe::merge_by_queue(std::vector<int32_t>& sym) const {
  HYTRA_CHECK(sym.size() < size_t(std::numeric_limits<int32_t>::max()), "tokenizer: a pre-token (one run of ",
              "letters, digits, symbols or spaces) of ", sym.size(), " bytes is longer than the 2^31-1 bytes supported");
  const int32_t n = int32_t(sym.size());
  std::vector<int32_t> prev(sym.size()), next(sym.size());  // of merged-away nodes (sym -1): unused
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Occurrences {
    int32_t left_sym, right_sym, merged;
    std::vector<int32_t> lefts;  // left node of each occurrence
  };
  std::unordered_map<int32_t, Occurrences> by_rank;
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ranks;  // ranks with occurrences
  auto add = [&](int32_t left) {  // the pair starting at `left`, if the table merges it
    const int32_t right = next[size_t(left)];
    if (right < 0) return;
    const int32_t a = sym[size_t(left)], b = sym[size_t(right)];
    auto m = merges_.find(pair_key(a, b));
    if (m == merges_.end()) return;
    Occurrences& o = by_rank.try_emplace(m->second.rank, Occurrences{a, b, m->second.merged, {}}).first->second;
    if (o.lefts.empty()) ranks.push(m->second.rank);
    o.lefts.push_back(left);
  };
  for (int32_t i = 0; i + 1 < n; ++i) add(i);
  std::vector<int32_t> round;
  while (!ranks.empty()) {
    Occurrences& o = by_rank.at(ranks.top());
    ranks.pop();
    round.swap(o.lefts);
    o.lefts.clear();
    // Occurrences are added in text order within a round; a list filled over several rounds is
    // sorted again, since a pair of equal symbols ("aaa") must merge left to right.
    if (!std::is_sorted(round.begin(), round.end())) std::sort(round.begin(), round.end());
    for (int32_t l : round) {
      const int32_t r = next[size_t(l)];
      if (sym[size_t(l)] != o.left_sym || r < 0 || sym[size_t(r)] != o.right_sym) continue;  // stale
      sym[size_t(l)] = o.merged;
      sym[size_t(r)] = -1;
      next[size_t(l)] = next[size_t(r)];
      if (next[size_t(l)] >= 0) prev[size_t(next[size_t(l)])] = l;
      if (prev[size_t(l)] >= 0) add(prev[size_t(l)]);
      add(l);
    }
  }
  size_t w = 0;  // node 0 is never merged away; compact the list in place
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) sym[w++] = sym[size_t(i)];
  sym.resize(w);
}

void Gpt2Bpe::encode_into(std::string_view text, size_t base_offset, WordCache& cache,
                          std::vector<int32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string_view> words;
  if (split_) {
    const size_t bad = utf8_invalid_offset(text);
    HYTRA_CHECK(bad == std::string_view::npos, "invalid UTF-8 in tokenizer input at byte offset ", base_offset + bad);
    split_->split_isolated(text, words);
  } else {
    gpt2_pretokenize(text, words, base_offset);
  }
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

std::vector<std::vector<int32_t>> Gpt2Bpe::encode_batch(const std::vector<std::string>& docs, ThreadPool& pool) const {
  std::vector<std::vector<int32_t>> out(docs.size());
  pool.parallel_for(int64_t(docs.size()), 1, [&](int64_t begin, int64_t end) {
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
