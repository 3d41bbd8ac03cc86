#include "cli/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace hytra {

TokenSampler::TokenSampler(const SamplingOptions& opt, uint64_t seed) : opt_(opt), rng_(seed) { validate(opt); }

void TokenSampler::validate(const SamplingOptions& opt) {
  HYTRA_CHECK(std::isfinite(opt.temperature) && opt.temperature >= 0, "--temperature: expected a number >= 0, got ",
              opt.temperature);
  HYTRA_CHECK(opt.top_k >= 0, "--top-k: expected a count >= 0 (0: no limit), got ", opt.top_k);
  HYTRA_CHECK(opt.top_p > 0 && opt.top_p <= 1, "--top-p: expected a probability in (0, 1], got ", opt.top_p);
}

int32_t TokenSampler::next(const std::vector<double>& logits) {
  HYTRA_ASSERT(!logits.empty(), "TokenSampler::next of no logits");
  const int64_t V = int64_t(logits.size());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; equal logits by id, so the order (and greedy's choice) is fixed.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (opt_.temperature == 0 || opt_.top_k == 1) return order[0];
  const int64_t keep = opt_.top_k > 0 ? std::min(opt_.top_k, V) : V;
  std::vector<double> p(static_cast<size_t>(keep));
  const double top = logits[size_t(order[0])] / opt_.temperature;
  double total = 0;
  for (int64_t i = 0; i < keep; ++i)
    total += p[size_t(i)] = std::exp(logits[size_t(order[i])] / opt_.temperature - top);
  int64_t n = keep;
  if (opt_.top_p < 1) {  // the shortest prefix reaching top_p of the (top-k renormalised) mass
    double cum = 0;
    for (n = 0; n < keep && cum < opt_.top_p * total;) cum += p[size_t(n++)];
    total = cum;
  }
  const double u = double(rng_() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    cum += p[size_t(i)];
    if (u < cum) return order[size_t(i)];
  }
  return order[size_t(n - 1)];  // u within rounding of the total
}

}  // namespace hytra
