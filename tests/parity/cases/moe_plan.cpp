// Parity cases for the dropless dispatch plan (moe_plan_dropless): every output exact. Routings with
// many tokens per expert, experts with 0 and with 1 token, half the tokens' first choice on one expert
// (skewed), top-k 1 to 8 and E up to 256.
#include <algorithm>
#include <numeric>
#include <random>

#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

// top (N,K): K distinct experts a token, drawn from the first `pool` experts; with `skew`, every even token's
// first choice is expert 0.
Tensor routing(int64_t N, int64_t K, int64_t pool, bool skew, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor top = Tensor::empty({N, K}, DType::I32);
  std::vector<int32_t> experts(static_cast<size_t>(pool));
  for (int64_t t = 0; t < N; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    for (int64_t j = 0; j < K; ++j) {  // partial Fisher-Yates: K distinct of the pool
      const int64_t pick = j + int64_t(rng() % uint64_t(pool - j));
      std::swap(experts[size_t(j)], experts[size_t(pick)]);
    }
    if (skew && t % 2 == 0) {
      const auto zero = std::find(experts.begin(), experts.end(), 0);
      std::iter_swap(experts.begin(), zero);
    }
    std::copy(experts.begin(), experts.begin() + K, top.data<int32_t>() + t * K);
  }
  return top;
}

void add_plan(int64_t N, int64_t K, int64_t E, int64_t pool, bool skew) {
  const std::string shape = "N=" + dims({N}) + " K=" + dims({K}) + " E=" + dims({E}) + " pool=" + dims({pool}) +
                            (skew ? " skewed" : "");
  Case c = make_case("moe_plan_dropless", shape, DType::I32, [=](uint64_t seed) {
    const Tensor top = routing(N, K, pool, skew, seed);
    std::vector<Output> outs;
    Tensor g[6] = {dev_empty({E}, DType::I32),     dev_empty({E + 1}, DType::I32), dev_empty({N * K}, DType::I32),
                   dev_empty({N * K}, DType::I32), dev_empty({N * K}, DType::I32), dev_empty({N * K}, DType::I32)};
    Tensor h[6] = {Tensor::empty({E}, DType::I32),     Tensor::empty({E + 1}, DType::I32),
                   Tensor::empty({N * K}, DType::I32), Tensor::empty({N * K}, DType::I32),
                   Tensor::empty({N * K}, DType::I32), Tensor::empty({N * K}, DType::I32)};
    const Tensor before = rand_ids({E}, 1000, seed + 1);  // counts accumulate onto these
    g[0] = dev(before);
    h[0] = before.clone();
    ops::moe_plan_dropless(gpu(), g[0], g[1], g[2], g[3], g[4], g[5], dev(top), E);
    ops::moe_plan_dropless(cpu(), h[0], h[1], h[2], h[3], h[4], h[5], top, E);
    const char* names[6] = {"counts", "offsets", "row_token", "row_slot", "slot_row", "token_rows"};
    for (int i = 0; i < 6; ++i) outs.push_back({names[i], g[i], h[i]});
    return outs;
  });
  c.criterion = Criterion::Exact;
  c.tol = 0;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(moe_plan) {
  add_plan(8192, 6, 32, 32, false);   // the moe-2b layer: many tokens per expert
  add_plan(8192, 6, 32, 32, true);    // half the tokens' first choice on expert 0
  add_plan(37, 8, 256, 256, false);   // E 256: most experts get 0 or 1 token
  add_plan(1, 8, 8, 8, false);        // one token: every expert exactly 1
  add_plan(300, 1, 16, 4, false);     // top-1 over 4 of 16 experts: 12 get none
  add_plan(5000, 2, 64, 64, true);    // more tokens than the rank kernel's threads, top-2
}

}  // namespace hytra::parity
