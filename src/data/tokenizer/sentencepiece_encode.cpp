#include "data/tokenizer/sentencepiece_encode.h"

#include <algorithm>
#include <cfloat>
#include <functional>
#include <queue>

#include "core/error.h"

namespace hytra {
namespace {

// SentencePiece's OneCharLen: the length a lead byte announces (no validation; the normalized text is valid UTF-8).
size_t one_char_length(char c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[uint8_t(c) >> 4];
}

}  // namespace

SpEncoder::SpEncoder(const SpModelProto& m, const std::string& where)
    : model_type_(m.model_type),
      byte_fallback_(m.byte_fallback),
      add_dummy_prefix_(m.add_dummy_prefix && !m.treat_whitespace_as_suffix),
      where_(where),
      vocab_(m, where),
      normalizer_(m, vocab_.user_defined(), where) {
  HYTRA_CHECK(model_type_ != SpModelType::Word, where,
              ": trainer_spec.model_type is WORD; hytra reads UNIGRAM, BPE and CHAR models");
  bos_ = vocab_.control_id(m.bos_piece);
  eos_ = vocab_.control_id(m.eos_piece);
  pad_ = vocab_.control_id(m.pad_piece);
  // Unigram's scores: the minimum and maximum over NORMAL pieces, the maximum starting from FLT_MIN as
  // SentencePiece's does (so a user-defined piece scores -0.1 when every normal score is negative).
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;
  for (int64_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_.type(int32_t(id)) != SpPieceType::Normal) continue;
    min_score_ = std::min(min_score_, vocab_.score(int32_t(id)));
    max_score_ = std::max(max_score_, vocab_.score(int32_t(id)));
  }
  if (model_type_ == SpModelType::Unigram) build_trie();
}

void SpEncoder::build_trie() {
  trie_.assign(1, TrieNode{});
  for (int64_t id = 0; id < vocab_.size(); ++id) {
    const SpPieceType type = vocab_.type(int32_t(id));
    if (type == SpPieceType::Unknown || type == SpPieceType::Control || type == SpPieceType::Byte) continue;
    uint32_t node = 0;
    for (char c : vocab_.text(int32_t(id))) {
      const uint64_t key = uint64_t(node) << 8 | uint8_t(c);
      auto it = trie_edges_.find(key);
      if (it == trie_edges_.end()) {
        it = trie_edges_.emplace(key, uint32_t(trie_.size())).first;
        trie_.push_back(TrieNode{});
      }
      node = it->second;
    }
    trie_[node].id = int32_t(id);
  }
}

size_t SpEncoder::symbol_length(std::string_view t, bool& frozen) const {
  const size_t user = normalizer_.user_defined_prefix(t);
  frozen = user > 0;
  return frozen ? user : std::min(one_char_length(t[0]), t.size());
}

SpEncoder::Pieces SpEncoder::segment_char(std::string_view t) const {
  Pieces out;
  bool frozen;
  for (size_t at = 0; at < t.size();) {
    const size_t n = symbol_length(t.substr(at), frozen);
    out.emplace_back(std::string(t.substr(at, n)), vocab_.piece_to_id(t.substr(at, n)));
    at += n;
  }
  return out;
}

// bpe_model.cc's Encode: symbols (characters, user-defined pieces frozen) merged pair by pair, the pair whose joined
// piece scores highest first (the leftmost on ties); an UNUSED result is split back into the pieces it was made of.
SpEncoder::Pieces SpEncoder::segment_bpe(std::string_view t) const {
  struct Symbol {
    int prev, next;
    size_t begin, len;
    bool frozen;
  };
  std::vector<Symbol> sym;
  for (size_t at = 0; at < t.size();) {
    bool frozen;
    const size_t n = symbol_length(t.substr(at), frozen);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, at, n, frozen});
    at += n;
  }
  if (sym.empty()) return {};
  sym.back().next = -1;
  struct Pair {
    float score;
    int left, right;
    size_t size;
  };
  auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> agenda(lower);
  std::unordered_map<std::string, std::pair<std::string, std::string>> unmerge;  // UNUSED piece -> its two parts
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[size_t(l)].frozen || sym[size_t(r)].frozen) return;
    const Symbol &a = sym[size_t(l)], &b = sym[size_t(r)];
    const std::string_view joined = t.substr(a.begin, a.len + b.len);
    const int32_t id = vocab_.normal_id(joined);
    if (id < 0) return;
    agenda.push({vocab_.score(id), l, r, joined.size()});
    if (vocab_.type(id) == SpPieceType::Unused)
      unmerge[std::string(joined)] = {std::string(t.substr(a.begin, a.len)), std::string(t.substr(b.begin, b.len))};
  };
  for (size_t i = 1; i < sym.size(); ++i) consider(int(i) - 1, int(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol &a = sym[size_t(top.left)], &b = sym[size_t(top.right)];
    if (a.len == 0 || b.len == 0 || a.len + b.len != top.size) continue;  // stale
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) sym[size_t(b.next)].prev = top.left;
    consider(a.prev, top.left);
    consider(top.left, a.next);
  }
  Pieces out;
  std::function<void(const std::string&)> resegment = [&](const std::string& w) {
    const int32_t id = vocab_.piece_to_id(w);
    auto it = vocab_.type(id) == SpPieceType::Unused ? unmerge.find(w) : unmerge.end();
    if (it == unmerge.end()) {
      out.emplace_back(w, id);
      return;
    }
    const std::pair<std::string, std::string> parts = it->second;
    resegment(parts.first);
    resegment(parts.second);
  };
  for (int i = 0; i >= 0; i = sym[size_t(i)].next)
    resegment(std::string(t.substr(sym[size_t(i)].begin, sym[size_t(i)].len)));
  return out;
}

// unigram_model.cc's EncodeOptimized: the best-scoring segmentation by dynamic programming over byte positions, in
// float as SentencePiece 0.2 computes it (0.1.x formed the sums in double, which decides a few near-ties in long
// texts otherwise); on equal scores the earliest start (the longest last piece) stays.
SpEncoder::Pieces SpEncoder::segment_unigram(std::string_view t) const {
  struct Best {
    int32_t id = -1;
    float score = 0;
    int64_t start = -1;
  };
  const size_t n = t.size();
  std::vector<Best> best(n + 1);
  const float unk_score = min_score_ - 10.0f;
  for (size_t start = 0; start < n;) {
    const float base = best[start].score;
    const size_t mb = std::min(one_char_length(t[start]), n - start);
    bool has_single = false;
    uint32_t node = 0;
    for (size_t end = start; end < n; ++end) {
      auto it = trie_edges_.find(uint64_t(node) << 8 | uint8_t(t[end]));
      if (it == trie_edges_.end()) break;
      node = it->second;
      const int32_t id = trie_[node].id;
      if (id < 0 || vocab_.type(id) == SpPieceType::Unused) continue;
      const size_t len = end + 1 - start;
      const float piece =
          vocab_.type(id) == SpPieceType::UserDefined ? float(len) * max_score_ - 0.1f : vocab_.score(id);
      const float candidate = piece + base;
      Best& b = best[end + 1];
      if (b.start < 0 || candidate > b.score) b = {id, candidate, int64_t(start)};
      if (len == mb) has_single = true;
    }
    if (!has_single) {
      const float candidate = unk_score + base;
      Best& b = best[start + mb];
      if (b.start < 0 || candidate > b.score) b = {vocab_.unk_id(), candidate, int64_t(start)};
    }
    start += mb;
  }
  Pieces out;
  for (size_t e = n; e > 0;) {
    const size_t s = size_t(best[e].start);
    out.emplace_back(std::string(t.substr(s, e - s)), best[e].id);
    e = s;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<int32_t> SpEncoder::encode(std::string_view text) const {
  const std::string t = normalizer_.normalize(text);
  const Pieces pieces = model_type_ == SpModelType::Bpe       ? segment_bpe(t)
                        : model_type_ == SpModelType::Unigram ? segment_unigram(t)
                                                              : segment_char(t);
  std::vector<int32_t> ids;
  bool prev_unk = false;
  for (const auto& [piece, id] : pieces) {
    const SpPieceType type = vocab_.type(id);
    HYTRA_CHECK(type != SpPieceType::Control, where_, ": the text '", piece, "' encodes as control piece ", id);
    const bool unk = type == SpPieceType::Unknown;
    if (unk && byte_fallback_) {
      for (char c : piece) ids.push_back(vocab_.byte_id(uint8_t(c)));
    } else if (!(unk && prev_unk)) {  // a run of unknown pieces is one UNKNOWN id
      ids.push_back(id);
    }
    prev_unk = unk;
  }
  return ids;
}

std::string SpEncoder::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    HYTRA_CHECK(id >= 0 && id < vocab_.size(), where_, ": id ", id, " is outside the ", vocab_.size(), " pieces");
    std::string_view piece = vocab_.text(id);
    switch (vocab_.type(id)) {
      case SpPieceType::Control: continue;
      case SpPieceType::Byte: out += char(vocab_.byte_of(id)); break;
      case SpPieceType::Unknown: out += " \xE2\x81\x87 "; break;
      default:
        // The dummy prefix: the first piece's leading "▁" is no space of the text.
        if (first && add_dummy_prefix_ && piece.substr(0, 3) == "\xE2\x96\x81") piece.remove_prefix(3);
        out += piece;
    }
    first = false;
  }
  std::string text;
  for (size_t i = 0; i < out.size();) {
    if (out.compare(i, 3, "\xE2\x96\x81") == 0) {
      text += ' ';
      i += 3;
    } else {
      text += out[i++];
    }
  }
  return text;
}

}  // namespace hytra
