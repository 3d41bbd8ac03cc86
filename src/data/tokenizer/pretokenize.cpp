// GPT-2 regex pre-tokenizer as a scanner (docs/spec/tokenizers.md §3, docs/spec/gotchas.md §2 item 8: the \s+(?!\S) lookahead).
#include "data/tokenizer/pretokenize.h"

#include "core/error.h"
#include "data/tokenizer/unicode_classes.h"

namespace hytra {
namespace {

enum class Cls : uint8_t { Letter, Number, Space, Other };

Cls classify(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return Cls::Letter;
    if (cp >= '0' && cp <= '9') return Cls::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return Cls::Space;
    return Cls::Other;
  }
  if (is_letter(cp)) return Cls::Letter;
  if (is_number(cp)) return Cls::Number;
  if (is_space(cp)) return Cls::Space;
  return Cls::Other;
}

}  // namespace

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp;
    int n = utf8_step(bytes, i, cp);
    if (n > 0) {
      out.append(bytes.substr(i, size_t(n)));
      i += size_t(n);
    } else {
      append_utf8(out, 0xFFFD);
      i += size_t(-n);
    }
  }
  return out;
}

size_t utf8_invalid_offset(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    char32_t cp;
    const int n = utf8_step(bytes, i, cp);
    if (n <= 0) return i;
    i += size_t(n);
  }
  return std::string_view::npos;
}

void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& out, size_t base_offset) {
  // Per code point: its class and the byte offset where it starts (offs has one extra entry).
  std::vector<Cls> cls;
  std::vector<uint32_t> offs;
  std::vector<char32_t> cps;
  cls.reserve(text.size());
  offs.reserve(text.size() + 1);
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    int n = utf8_step(text, i, cp);
    HYTRA_CHECK(n > 0, "invalid UTF-8 in tokenizer input at byte offset ", base_offset + i, " (byte 0x",
                std::hex, int(static_cast<unsigned char>(text[i])), ")");
    cps.push_back(cp);
    cls.push_back(classify(cp));
    offs.push_back(uint32_t(i));
    i += size_t(n);
  }
  offs.push_back(uint32_t(text.size()));
  const size_t n = cps.size();
  auto emit = [&](size_t a, size_t b) { out.push_back(text.substr(offs[a], offs[b] - offs[a])); };

  size_t i = 0;
  while (i < n) {
    const char32_t c = cps[i];
    // (1) contractions, case-sensitive ASCII.
    if (c == '\'' && i + 1 < n) {
      char32_t d = cps[i + 1];
      if (d == 's' || d == 't' || d == 'm' || d == 'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n && ((d == 'r' && cps[i + 2] == 'e') || (d == 'v' && cps[i + 2] == 'e') ||
                        (d == 'l' && cps[i + 2] == 'l'))) {
        emit(i, i + 3);
        i += 3;
        continue;
      }
    }
    // (2)-(4) an optional ASCII space, then a run of letters, of numbers, or of other characters.
    size_t start = (c == ' ' && i + 1 < n && cls[i + 1] != Cls::Space) ? i + 1 : i;
    if (cls[start] != Cls::Space) {
      const Cls k = cls[start];
      size_t j = start + 1;
      while (j < n && cls[j] == k) ++j;
      emit(i, j);
      i = j;
      continue;
    }
    // (5) \s+(?!\S): a whitespace run followed by a non-space gives back its last character;
    // (6) \s+ when that leaves nothing (a single whitespace character before a non-space).
    size_t q = i + 1;
    while (q < n && cls[q] == Cls::Space) ++q;
    size_t end = (q < n && q - i >= 2) ? q - 1 : q;
    emit(i, end);
    i = end;
  }
}

}  // namespace hytra
