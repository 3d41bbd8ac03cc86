// GPT-2 byte-to-unicode alphabet and its inverse (docs/spec/tokenizers.md §2).
#include "data/tokenizer/byte_alphabet.h"

#include <array>

#include "data/tokenizer/pretokenize.h"

namespace hytra {
namespace {

bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<char32_t, 256> to_cp{};
  std::array<int, 0x144> to_byte{};  // code point -> byte, -1 if not in the alphabet
  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[size_t(b)] = printable(b) ? char32_t(b) : next++;
      to_byte[to_cp[size_t(b)]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_alphabet(unsigned char b) { return tables().to_cp[b]; }

std::string bytes_to_alphabet(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_alphabet(static_cast<unsigned char>(c)));
  return out;
}

std::string alphabet_to_bytes(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len > token.size() - i) len = token.size() - i;
    char32_t cp = c < 0x80 ? c : len == 2 ? char32_t(((c & 0x1F) << 6) | (token[i + 1] & 0x3F)) : 0x10FFFF;
    if (cp < t.to_byte.size() && t.to_byte[cp] >= 0) {
      out += char(t.to_byte[cp]);
    } else {
      out.append(token.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace hytra
