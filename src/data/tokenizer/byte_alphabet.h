// GPT-2's byte-to-unicode alphabet (docs/spec/tokenizers.md §2): bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to the
// same code point; the other 68 bytes map, in increasing byte order, to U+0100..U+0143.
#pragma once
#include <string>
#include <string_view>

namespace hytra {

char32_t byte_to_alphabet(unsigned char b);
// Raw bytes -> the UTF-8 token string in the alphabet (how vocab entries are spelled).
std::string bytes_to_alphabet(std::string_view bytes);
// Token string (UTF-8) -> raw bytes; characters outside the alphabet are kept as their UTF-8 bytes.
std::string alphabet_to_bytes(std::string_view token);

}  // namespace hytra
