// Parity cases for the dispatch plans (moe_plan_dropless, moe_plan_capacity): every output exact. Routings
// with many tokens per expert, experts with 0 and with 1 token, half the tokens' first choice on one expert
// (skewed), top-k 1 to 8 and E up to 256. The capacity plans add probabilities from a few values (ties), both
// drop policies, padding to the capacity and to a multiple (with and without a capacity), and capacities at
// least N (nothing dropped).
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
  const std::string shape =
      "N=" + dims({N}) + " K=" + dims({K}) + " E=" + dims({E}) + " pool=" + dims({pool}) + (skew ? " skewed" : "");
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

struct CapacityCase {
  int64_t N, K, E, pool;
  bool skew;
  int levels;  // probabilities from 1..levels: ties
  int64_t capacity;
  bool by_position, pad_to_capacity;
  int64_t multiple;
};

void add_capacity(const CapacityCase& p) {
  const std::string shape = "N=" + dims({p.N}) + " K=" + dims({p.K}) + " E=" + dims({p.E}) + " pool=" + dims({p.pool}) +
                            (p.skew ? " skewed" : "") + " levels=" + dims({p.levels}) +
                            " capacity=" + dims({p.capacity}) + (p.by_position ? " position" : " probs") +
                            (p.pad_to_capacity ? " pad_to_capacity" : "") + " multiple=" + dims({p.multiple});
  Case c = make_case("moe_plan_capacity", shape, DType::I32, [=](uint64_t seed) {
    const int64_t N = p.N, K = p.K, E = p.E, NK = N * K;
    const int64_t R = ops::moe_capacity_rows(N, K, E, p.capacity, p.pad_to_capacity, p.multiple);
    const Tensor top = routing(N, K, p.pool, p.skew, seed);
    const Tensor probs = rand_ints({N, K}, DType::F32, seed + 2, 1, p.levels);
    const Shape shapes[8] = {{E}, {E + 1}, {R}, {R}, {N + 1}, {R}, {NK + 1}, {NK}};
    Tensor g[8], h[8];
    for (int i = 0; i < 8; ++i) {
      g[i] = dev_empty(shapes[i], DType::I32);
      h[i] = Tensor::empty(shapes[i], DType::I32);
    }
    const Tensor before = rand_ids({E}, 1000, seed + 1);  // counts accumulate onto these
    g[0] = dev(before);
    h[0] = before.clone();
    ops::moe_plan_capacity(gpu(), g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], dev(top), dev(probs), E, p.capacity,
                           p.by_position, p.pad_to_capacity, p.multiple);
    ops::moe_plan_capacity(cpu(), h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], top, probs, E, p.capacity,
                           p.by_position, p.pad_to_capacity, p.multiple);
    const char* names[8] = {"counts",        "offsets",    "row_token",    "row_prob",
                            "token_offsets", "token_rows", "prob_offsets", "prob_rows"};
    std::vector<Output> outs;
    for (int i = 0; i < 8; ++i) outs.push_back({names[i], g[i], h[i]});
    return outs;
  });
  c.criterion = Criterion::Exact;
  c.tol = 0;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(moe_plan) {
  add_plan(8192, 6, 32, 32, false);  // the moe-2b layer: many tokens per expert
  add_plan(8192, 6, 32, 32, true);   // half the tokens' first choice on expert 0
  add_plan(37, 8, 256, 256, false);  // E 256: most experts get 0 or 1 token
  add_plan(1, 8, 8, 8, false);       // one token: every expert exactly 1
  add_plan(300, 1, 16, 4, false);    // top-1 over 4 of 16 experts: 12 get none
  add_plan(5000, 2, 64, 64, true);   // more tokens than the rank kernel's threads, top-2
  // {N, K, E, pool, skew, levels, capacity, by_position, pad_to_capacity, multiple}
  add_capacity({8192, 6, 32, 32, true, 4, 1536, false, false, 0});    // moe-2b, factor 1: expert 0 drops by prob
  add_capacity({8192, 6, 32, 32, true, 4, 1536, true, false, 0});     // the same by position
  add_capacity({8192, 6, 32, 32, true, 2, 768, false, true, 0});      // factor 0.5, padded to the capacity
  add_capacity({2048, 2, 16, 16, false, 3, 256, false, true, 16});    // padded to the capacity, then to 16
  add_capacity({5000, 2, 64, 64, true, 5, 0, false, false, 16});      // dropless, padded to 16
  add_capacity({300, 1, 16, 4, false, 3, 30, false, false, 8});       // top-1 on 4 of 16: 12 experts empty (0 rows)
  add_capacity({1000, 1, 8, 8, true, 2, 100, true, true, 16});        // top-1, capacity 100 -> 112 rows each
  add_capacity({37, 8, 256, 256, false, 3, 1, false, false, 4});      // E 256: 0 or 1 token each, capacity 1
  add_capacity({37, 8, 256, 256, false, 2, 2, false, true, 0});       // every expert 2 rows, mostly padding
  add_capacity({1, 8, 8, 8, false, 3, 1, false, true, 0});            // one token
  add_capacity({500, 4, 8, 8, false, 3, 1000, false, false, 0});      // capacity above N: nothing dropped
  add_capacity({500, 4, 8, 8, true, 3, 1000, false, true, 0});        // ... and every expert all N tokens
  add_capacity({4096, 8, 64, 64, true, 2, 256, true, false, 32});     // top-8 by position, padded to 32
  add_capacity({3000, 3, 12, 12, true, 1000, 500, false, false, 0});  // many probability values
}

}  // namespace hytra::parity
