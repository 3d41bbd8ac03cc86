// A deterministic byte mutator for the readers' fuzz tests (tests/fuzz/test_fuzz.cpp): from a seed, one to four
// edits drawn from a seeded generator: flip bits, overwrite bytes with boundary values (0, 0x7f, 0x80, 0xff, ASCII
// digits and JSON/YAML punctuation), insert or delete runs, duplicate a run, truncate, or splice in part of another
// input. The same seed and counter give the same input on every machine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hytra::test {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next();  // splitmix64
  std::string mutate(const std::string& input, const std::vector<std::string>& others);

 private:
  uint64_t state_;
};

}  // namespace hytra::test
