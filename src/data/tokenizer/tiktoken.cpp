#include "data/tokenizer/tiktoken.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/json.h"
#include "data/tokenizer/pretokenize.h"

namespace hytra {
namespace {

// Megatron's PATTERN_TIKTOKEN and PATTERN_TIKTOKEN_V2.
constexpr const char* kPatternV1 =
    R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kPatternV2 = R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
                                   R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
                                   R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Standard base64 (RFC 4648, '=' padding), or an error naming `where`.
std::string base64_decode(const std::string& s, const std::string& where) {
  auto value = [&](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  HYTRA_CHECK(s.size() % 4 == 0, where, ": token_bytes is not base64 (length ", s.size(), ")");
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    const int pad = (s[i + 3] == '=') + (s[i + 2] == '=' && s[i + 3] == '=');
    HYTRA_CHECK(pad == 0 || i + 4 == s.size(), where, ": token_bytes is not base64 ('=' inside)");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = k >= 4 - pad ? 0 : value(s[i + size_t(k)]);
      HYTRA_CHECK(d >= 0, where, ": token_bytes is not base64 ('", s[i + size_t(k)], "')");
      v = v << 6 | uint32_t(d);
    }
    for (int k = 0; k < 3 - pad; ++k) out += char(v >> (16 - 8 * k) & 0xFF);
  }
  return out;
}

}  // namespace

const char* TikTokenizer::pattern_text(const std::string& name) {
  return name == "v1" ? kPatternV1 : name == "v2" ? kPatternV2 : nullptr;
}

TikTokenizer::TikTokenizer(const TikTokenConfig& cfg)
    : pattern_([&] {
        const char* p = pattern_text(cfg.pattern);
        HYTRA_CHECK(p != nullptr, "--tiktoken-pattern: expected v1 or v2, got '", cfg.pattern, "'");
        return UnicodeRegex(p, "--tiktoken-pattern " + cfg.pattern);
      }()) {
  vocab_size_ = cfg.vocab_size > 0 ? cfg.vocab_size : int64_t(1) << 17;
  HYTRA_CHECK(vocab_size_ <= std::numeric_limits<int32_t>::max(), "--vocab-size: ", vocab_size_,
              " is past the largest int32 token id");
  num_special_ = cfg.num_special_tokens;
  std::vector<std::string> specials = cfg.special_tokens;
  if (specials.empty()) specials = {"<unk>", "<s>", "</s>"};
  const std::set<std::string> unique(specials.begin(), specials.end());
  HYTRA_CHECK(unique.size() == specials.size(), "--tiktoken-special-tokens: a token is given twice");
  for (const char* needed : {"<unk>", "<s>", "</s>"})
    HYTRA_CHECK(unique.count(needed), "--tiktoken-special-tokens: must include <unk>, <s> and </s> (", needed,
                " is missing)");
  HYTRA_CHECK(int64_t(specials.size()) <= num_special_ && num_special_ < vocab_size_,
              "--tiktoken-num-special-tokens: expected ", specials.size(), " (the special tokens) to --vocab-size (",
              vocab_size_, ") - 1, got ", num_special_);
  // The <SPECIAL_k> texts past the given tokens are made when decoded (their count is only bounded by --vocab-size).
  special_texts_ = specials;
  eos_ = int32_t(std::find(specials.begin(), specials.end(), "</s>") - specials.begin());

  const std::string& path = cfg.path;
  HYTRA_CHECK(!path.empty(), "--tokenizer-type TikTokenizer: needs --tokenizer-model (the JSON vocabulary)");
  const Json vocab = Json::parse_file(path);
  HYTRA_CHECK(vocab.is_array(), path, ": expected a JSON list of {\"rank\", \"token_bytes\", \"token_str\"}");
  const auto& entries = vocab.as_array();
  const int64_t inner = vocab_size_ - num_special_;
  HYTRA_CHECK(int64_t(entries.size()) >= inner, path, ": ", entries.size(), " tokens; --vocab-size ", vocab_size_,
              " with ", num_special_, " special tokens needs ", inner);
  ranks_.reserve(size_t(inner) * 2);
  for (int64_t i = 0; i < inner; ++i) {
    const Json& e = entries[size_t(i)];
    const std::string where = str(path, "[", i, "]");
    HYTRA_CHECK(
        e.is_object() && e.as_object().size() == 3 && e.find("rank") && e.find("token_bytes") && e.find("token_str"),
        where, ": expected exactly the keys rank, token_bytes, token_str");
    HYTRA_CHECK(e.at("rank").as_int("rank") == i, where, ": rank ", e.at("rank").as_int("rank"), " at index ", i,
                " (ranks must be 0, 1, 2, ... in order)");
    std::string bytes = base64_decode(e.at("token_bytes").as_string("token_bytes"), where);
    HYTRA_CHECK(i >= 256 || bytes == std::string(1, char(i)), where, ": ranks 0-255 must be the single bytes 0-255");
    HYTRA_CHECK(!bytes.empty(), where, ": an empty token");
    HYTRA_CHECK(ranks_.emplace(bytes, int32_t(i)).second, where, ": token_bytes repeat an earlier token's");
    id_bytes_.push_back(std::move(bytes));
  }
}

int32_t TikTokenizer::rank_of(std::string_view bytes) const {
  const auto it = ranks_.find(std::string(bytes));
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<int32_t> TikTokenizer::encode_piece(std::string_view piece) const {
  const int32_t offset = int32_t(num_special_);
  if (const int32_t whole = rank_of(piece); whole >= 0) return {whole + offset};
  // Parts are byte spans [start, next part's start); pairs ranked by the rank of their concatenation, taken
  // lowest rank first, leftmost (smallest start) on ties, as tiktoken's loop; stale heap entries are skipped.
  const int32_t n = int32_t(piece.size());
  std::vector<int32_t> next(size_t(n) + 1), prev(size_t(n) + 1);
  for (int32_t i = 0; i <= n; ++i) {
    next[size_t(i)] = i + 1;
    prev[size_t(i)] = i - 1;
  }
  using Entry = std::tuple<int32_t, int32_t, int32_t>;  // (rank, left start, end of the pair)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || left >= n || next[size_t(left)] >= n) return;
    const int32_t end = next[size_t(next[size_t(left)])];
    const int32_t r = rank_of(piece.substr(size_t(left), size_t(end - left)));
    if (r >= 0) heap.emplace(r, left, end);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(size_t(n) + 1, true);
  while (!heap.empty()) {
    const auto [r, left, end] = heap.top();
    heap.pop();
    if (!alive[size_t(left)] || next[size_t(left)] >= n || next[size_t(next[size_t(left)])] != end) continue;
    const int32_t right = next[size_t(left)];
    alive[size_t(right)] = false;  // the right part joins the left one
    next[size_t(left)] = end;
    prev[size_t(end)] = left;
    push(prev[size_t(left)]);
    push(left);
  }
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; i = next[size_t(i)]) {
    const int32_t r = rank_of(piece.substr(size_t(i), size_t(next[size_t(i)] - i)));
    HYTRA_CHECK(r >= 0, "TikTokenizer: the vocabulary has no token for byte 0x", std::hex,
                int(static_cast<unsigned char>(piece[size_t(i)])));
    ids.push_back(r + offset);
  }
  return ids;
}

std::vector<int32_t> TikTokenizer::encode(std::string_view utf8) const {
  const size_t bad = utf8_invalid_offset(utf8);
  HYTRA_CHECK(bad == std::string_view::npos, "TikTokenizer: invalid UTF-8 at byte offset ", bad);
  std::vector<std::string_view> pieces;
  pattern_.find_all(utf8, pieces);
  std::vector<int32_t> ids;
  for (std::string_view p : pieces) {
    const std::vector<int32_t> part = encode_piece(p);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::string TikTokenizer::decode(const std::vector<int32_t>& ids) const {
  return utf8_replace_invalid(decode_bytes(ids));
}

std::string TikTokenizer::decode_bytes(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    HYTRA_CHECK(id >= 0 && id < num_special_ + int64_t(id_bytes_.size()), "decode: token id ", id, " out of range [0, ",
                num_special_ + int64_t(id_bytes_.size()), ")");
    if (id >= num_special_)
      out += id_bytes_[size_t(id - num_special_)];
    else if (size_t(id) < special_texts_.size())
      out += special_texts_[size_t(id)];
    else
      out += str("<SPECIAL_", id, ">");
  }
  return out;
}

}  // namespace hytra
