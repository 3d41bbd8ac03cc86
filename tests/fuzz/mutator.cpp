#include "fuzz/mutator.h"

#include <algorithm>

namespace hytra::test {

uint64_t Mutator::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string Mutator::mutate(const std::string& input, const std::vector<std::string>& others) {
  static const std::string interesting = std::string("\0\x7f\x80\xff", 4) + "0123456789-+.eE\"{}[]:,#'=\n \\u";
  std::string s = input;
  const int edits = 1 + int(next() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : size_t(next() % s.size());
    const size_t run = 1 + size_t(next() % 16);
    switch (next() % 8) {
      case 0:  // flip a bit
        if (!s.empty()) s[at] = char(s[at] ^ char(1u << (next() % 8)));
        break;
      case 1:  // a boundary byte
        if (!s.empty()) s[at] = interesting[next() % interesting.size()];
        break;
      case 2:  // insert a run of boundary bytes
        for (size_t i = 0; i < run; ++i) s.insert(std::min(at, s.size()), 1, interesting[next() % interesting.size()]);
        break;
      case 3:  // delete a run
        if (!s.empty()) s.erase(at, std::min(run, s.size() - at));
        break;
      case 4:  // duplicate a run
        if (!s.empty()) s.insert(at, s.substr(at, run));
        break;
      case 5:  // truncate
        s.resize(at);
        break;
      case 6:  // a random byte
        if (!s.empty()) s[at] = char(next() & 0xff);
        break;
      default:  // splice in part of another input
        if (!others.empty()) {
          const std::string& o = others[next() % others.size()];
          if (!o.empty()) s.insert(std::min(at, s.size()), o.substr(size_t(next() % o.size()), run * 4));
        }
    }
  }
  return s;
}

}  // namespace hytra::test
