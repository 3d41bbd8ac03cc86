// The host reference of the MoE dispatch plans (host_dispatch_plan.h).
#include "unit/host_dispatch_plan.h"

#include <algorithm>

#include "core/error.h"
#include "core/int_tensor.h"

namespace hytra {

namespace {
Tensor int_tensor(const std::vector<int32_t>& v, Device device) { return int32_tensor(v, {int64_t(v.size())}, device); }
}  // namespace

HostPlan host_dispatch_plan(const std::vector<int32_t>& top, const std::vector<double>& probs, int64_t N,
                            const DispatchOptions& o, Device device) {
  const int64_t E = o.num_experts, K = o.topk;
  HYTRA_CHECK(int64_t(top.size()) == N * K && int64_t(probs.size()) == N * K, "host_dispatch_plan: expected ", N * K,
              " routing choices, got ", top.size());
  // Per expert: the (token, choice) pairs routed to it, in token order.
  struct Choice {
    int64_t token, slot;  // slot = t*K + j, or N*K for a padding row
  };
  std::vector<std::vector<Choice>> routed(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = top[size_t(t * K + j)];
      HYTRA_CHECK(e >= 0 && e < E, "host_dispatch_plan: expert id ", e, " out of range [0, ", E, ")");
      routed[size_t(e)].push_back({t, t * K + j});
    }

  const bool capped = o.capacity_factor > 0;
  const int64_t capacity = expert_capacity(N, o);
  HostPlan plan;
  plan.rows_per_expert.assign(size_t(E), 0);
  plan.routed_per_expert.assign(size_t(E), 0);
  std::vector<std::vector<Choice>> rows(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    std::vector<Choice> keep = routed[size_t(e)];
    if (capped && int64_t(keep.size()) > capacity) {
      if (!o.drop_by_position)  // the best probabilities (stable: ties keep the lower token)
        std::stable_sort(keep.begin(), keep.end(), [&](const Choice& a, const Choice& b) {
          return probs[size_t(a.slot)] > probs[size_t(b.slot)];
        });
      keep.resize(size_t(capacity));
      std::sort(keep.begin(), keep.end(), [](const Choice& a, const Choice& b) { return a.token < b.token; });
    }
    plan.routed_per_expert[size_t(e)] = int64_t(keep.size());
    int64_t target = int64_t(keep.size());
    if (capped && o.pad_to_capacity) target = std::min(capacity, N);
    if (o.pad_multiple > 0) target = (target + o.pad_multiple - 1) / o.pad_multiple * o.pad_multiple;
    target = std::min(target, N);  // an expert cannot hold a token twice
    // Fill with the lowest-index tokens this expert does not hold (dropped ones included, as in
    // Megatron's routing map after dropping), with probability 0.
    std::vector<char> used(size_t(N), 0);
    for (const Choice& c : keep) used[size_t(c.token)] = 1;
    for (int64_t t = 0; t < N && int64_t(keep.size()) < target; ++t)
      if (!used[size_t(t)]) keep.push_back({t, N * K});
    std::sort(keep.begin(), keep.end(), [](const Choice& a, const Choice& b) { return a.token < b.token; });
    plan.rows_per_expert[size_t(e)] = int64_t(keep.size());
    rows[size_t(e)] = std::move(keep);
  }

  std::vector<int32_t> row_token, row_prob;
  std::vector<std::vector<int32_t>> token_rows(static_cast<size_t>(N));
  std::vector<int32_t> prob_row(size_t(N * K), -1);
  for (int64_t e = 0; e < E; ++e)
    for (const Choice& c : rows[size_t(e)]) {
      const int32_t r = int32_t(row_token.size());
      row_token.push_back(int32_t(c.token));
      row_prob.push_back(int32_t(c.slot));
      token_rows[size_t(c.token)].push_back(r);
      if (c.slot < N * K) prob_row[size_t(c.slot)] = r;
    }
  plan.rows = int64_t(row_token.size());
  std::vector<int32_t> t_off(size_t(N + 1), 0), t_rows;
  for (int64_t t = 0; t < N; ++t) {
    t_rows.insert(t_rows.end(), token_rows[size_t(t)].begin(), token_rows[size_t(t)].end());
    t_off[size_t(t + 1)] = int32_t(t_rows.size());
  }
  std::vector<int32_t> p_off(size_t(N * K + 1), 0), p_rows;
  for (int64_t i = 0; i < N * K; ++i) {
    if (prob_row[size_t(i)] >= 0) p_rows.push_back(prob_row[size_t(i)]);
    p_off[size_t(i + 1)] = int32_t(p_rows.size());
  }
  std::vector<int32_t> e_off(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) e_off[size_t(e + 1)] = e_off[size_t(e)] + int32_t(plan.rows_per_expert[size_t(e)]);
  plan.expert_offsets = int_tensor(e_off, device);
  plan.row_token = int_tensor(row_token, device);
  plan.row_prob = int_tensor(row_prob, device);
  plan.token_offsets = int_tensor(t_off, device);
  plan.token_rows = int_tensor(t_rows, device);
  plan.prob_offsets = int_tensor(p_off, device);
  plan.prob_rows = int_tensor(p_rows, device);
  return plan;
}

}  // namespace hytra
