#include "data/tokenizer/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>

#include "core/error.h"
#include "data/tokenizer/unicode_classes.h"

namespace hytra {
namespace {

std::string ranges_text(std::span<const CodePointRange> ranges) {
  std::string s;
  char b[40];
  for (const CodePointRange& r : ranges) {
    std::snprintf(b, sizeof b, r.lo == r.hi ? "\\x{%X}" : "\\x{%X}-\\x{%X}", unsigned(r.lo), unsigned(r.hi));
    s += b;
  }
  return s;
}

}  // namespace

struct UnicodeRegex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::string UnicodeRegex::translate(const std::string& p, const std::string& where) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      std::string ranges;
      bool negated = false;
      if (e == 'p' || e == 'P') {
        const size_t close = p.find('}', i);
        HYTRA_CHECK(i + 2 < p.size() && p[i + 2] == '{' && close != std::string::npos, where, ": '\\", e, "' at byte ",
                    i, " needs a {Name}");
        const std::string name = p.substr(i + 3, close - i - 3);
        ranges = ranges_text(unicode_property(name));
        HYTRA_CHECK(!ranges.empty(), where, ": \\", e, "{", name, "} at byte ", i,
                    " is not a property hytra knows (L, N, Lu, Lt, Lm, Lo, Ll, M)");
        negated = e == 'P';
        i = close;
      } else if (e == 's' || e == 'S') {
        ranges = ranges_text(unicode_property("White_Space"));
        negated = e == 'S';
        ++i;
      } else {
        out += p.substr(i, 2);
        ++i;
        continue;
      }
      HYTRA_CHECK(!(in_class && negated), where, ": a negated class escape inside [...] at byte ", i,
                  " is not supported");
      out += in_class ? ranges : (negated ? "[^" : "[") + ranges + "]";
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is a literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  HYTRA_CHECK(!in_class, where, ": a '[' is never closed");
  return out;
}

UnicodeRegex::UnicodeRegex(const std::string& pattern, const std::string& where) : code_(new Compiled) {
  const std::string t = translate(pattern, where);
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(t.data()), t.size(), PCRE2_UTF | PCRE2_NO_UTF_CHECK, &err,
                              &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(str(where, ": the pattern does not compile: ", reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // (without JIT, PCRE2 interprets: same matches)
}

UnicodeRegex::~UnicodeRegex() = default;
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;

void UnicodeRegex::find_all(std::string_view text, std::vector<std::string_view>& out) const {
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
  HYTRA_CHECK(md != nullptr, "pre-tokenizer: out of memory for the regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t at = 0; at < text.size();) {
    const int rc = pcre2_match(code_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    HYTRA_CHECK(rc > 0, "pre-tokenizer: regex match failed with PCRE2 error ", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] > ov[0]) out.push_back(text.substr(ov[0], ov[1] - ov[0]));
    // An empty match moves on by one character (a UTF-8 lead byte and its continuation bytes).
    at = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    while (ov[1] == ov[0] && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  }
}

void UnicodeRegex::split_isolated(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> matches;
  find_all(text, matches);
  size_t at = 0;
  for (std::string_view m : matches) {
    const size_t begin = size_t(m.data() - text.data());
    if (begin > at) out.push_back(text.substr(at, begin - at));
    out.push_back(m);
    at = begin + m.size();
  }
  if (at < text.size()) out.push_back(text.substr(at));
}

}  // namespace hytra
