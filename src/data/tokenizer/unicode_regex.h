// Pre-tokenizer regexes in the dialect of tiktoken's and Megatron's patterns (Rust regex / fancy-regex: \p{L},
// \p{N}, \p{Lu} ... \p{M}, \s as Unicode White_Space, possessive quantifiers, (?!...) lookahead), run by PCRE2
// (linked statically). \p{...}, \s and \S are rewritten as explicit code-point ranges from unicode_classes.h before
// compiling, so the classes are those tables' (one Unicode version for every tokenizer), not PCRE2's own.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hytra {

class UnicodeRegex {
 public:
  // Errors name `where` (the flag or file the pattern came from) and PCRE2's message.
  UnicodeRegex(const std::string& pattern, const std::string& where);
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;

  // Appends every non-overlapping leftmost-first match of valid UTF-8 `text`, in order (the text between matches
  // is skipped, as tiktoken's find_iter skips it). Thread-safe.
  void find_all(std::string_view text, std::vector<std::string_view>& out) const;
  // Hugging Face's Split pre-tokenizer with behavior "Isolated": the matches and the text between them, in order.
  void split_isolated(std::string_view text, std::vector<std::string_view>& out) const;

  // The PCRE2 form of a pattern (the rewriting above), for tests.
  static std::string translate(const std::string& pattern, const std::string& where);

 private:
  struct Compiled;
  std::unique_ptr<Compiled> code_;
};

}  // namespace hytra
