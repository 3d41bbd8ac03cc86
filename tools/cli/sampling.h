// TokenSampler: the next token from a row of logits, as Megatron's text generation samples (temperature, then top-k,
// then top-p over the renormalised probabilities), reproducibly: the same seed and logits give the same tokens.
// Temperature 0 or top-k 1 is greedy (the highest logit; the lowest id among equal ones).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace hytra {

struct SamplingOptions {
  double temperature = 1.0;  // --temperature: logits / temperature; 0 = greedy
  int64_t top_k = 0;         // --top-k: only the k most likely tokens (0: all)
  double top_p = 1.0;        // --top-p: the fewest most likely tokens whose probabilities sum to >= p (1: all)
};

class TokenSampler {
 public:
  TokenSampler(const SamplingOptions& opt, uint64_t seed);  // validates opt
  static void validate(const SamplingOptions& opt);         // throws naming the flag out of range
  int32_t next(const std::vector<double>& logits);

 private:
  SamplingOptions opt_;
  std::mt19937_64 rng_;  // fully specified by the standard: the same draws on every platform
};

}  // namespace hytra
