#include "data/tokenizer/null_tokenizer.h"

#include <climits>

#include "core/error.h"

namespace hytra {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's int(piece) for ASCII text, or -1 when it is not an integer in [0, limit].
int64_t parse_id(std::string_view piece, int64_t limit) {
  size_t b = 0, e = piece.size();
  while (b < e && is_space(piece[b])) ++b;
  while (e > b && is_space(piece[e - 1])) --e;
  bool negative = false;
  if (b < e && (piece[b] == '+' || piece[b] == '-')) negative = piece[b++] == '-';
  if (b == e || !is_digit(piece[b]) || !is_digit(piece[e - 1])) return -1;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) {
    if (piece[i] == '_' && is_digit(piece[i + 1]) && is_digit(piece[i - 1])) continue;  // 1_000
    if (!is_digit(piece[i])) return -1;
    v = v * 10 + (piece[i] - '0');
    if (v > limit) return -1;
  }
  return negative && v != 0 ? -1 : v;
}

}  // namespace

NullTokenizer::NullTokenizer(int64_t vocab_size) : vocab_(vocab_size) {
  HYTRA_CHECK(vocab_size > 0 && vocab_size < INT32_MAX,
              "--vocab-size: NullTokenizer needs the vocabulary size "
              "without the end-of-document id (a positive integer below 2^31 - 1), got ",
              vocab_size);
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (size_t start = 0;;) {
    const size_t space = text.find(' ', start);
    const std::string_view piece = text.substr(start, space == std::string_view::npos ? space : space - start);
    const int64_t id = parse_id(piece, vocab_);
    HYTRA_CHECK(id >= 0, "NullTokenizer: '", std::string(piece.substr(0, 40)), "' at byte ", start,
                " is not a token id in [0, ", vocab_, "] (the text must be ids separated by single spaces)");
    ids.push_back(int32_t(id));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  return ids;
}

std::string NullTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out;
}

}  // namespace hytra
