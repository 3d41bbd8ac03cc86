// The GPT-2 pre-tokenizer (docs/spec/tokenizers.md §3): splits UTF-8 text like the JavaScript regex
//   /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu
// with matchAll semantics (leftmost match, first matching alternative, no gaps), written as a
// hand scanner over the Unicode classes of unicode_classes.h. Also UTF-8 helpers shared by the
// tokenizer.
#pragma once
#include <cstdint>
#include <string>

#include "core/utf8.h"
#include <string_view>
#include <vector>

namespace hytra {

// Appends the pre-tokens of `text` (views into it) to `out`. Invalid UTF-8 throws hytra::Error
// naming the byte offset (offset of `text` within the caller's input is `base_offset`).
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& out, size_t base_offset = 0);

// Decodes UTF-8 bytes the way the WHATWG TextDecoder does: each maximal invalid subpart becomes U+FFFD.
std::string utf8_replace_invalid(std::string_view bytes);

// Offset of the first byte that does not start a well-formed UTF-8 sequence (what encode() rejects),
// or std::string_view::npos when all of `bytes` is valid.
size_t utf8_invalid_offset(std::string_view bytes);

}  // namespace hytra
