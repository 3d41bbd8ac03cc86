// The dispatch plans, CPU reference (ops.def moe_plan_dropless, moe_plan_capacity).
// Dropless: a stable counting sort of the (token, choice) pairs by expert. Row of choice i = t*K + j with
// expert e: the rows of the experts before e, plus the choices before i routed to e.
// Capacity: expert by expert, its choices in token order, the dropped ones removed (a stable sort by
// probability, or their position), the padding tokens merged in, then the rows appended; the CSRs follow
// from the rows.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {

void moe_plan_dropless(Exec&, Tensor& counts, Tensor& offsets, Tensor& row_token, Tensor& row_slot,
                       Tensor& slot_row, Tensor& token_rows, const Tensor& top, int64_t num_experts) {
  const int64_t K = top.size(1), NK = top.numel(), E = num_experts;
  const int32_t* ids = top.data<int32_t>();
  std::vector<int64_t> count(size_t(E), 0);
  for (int64_t i = 0; i < NK; ++i) {
    HYTRA_CHECK(ids[i] >= 0 && ids[i] < E, "moe_plan_dropless: expert id ", ids[i], " at choice ", i,
                " is outside [0, ", E, ")");
    ++count[size_t(ids[i])];
  }
  std::vector<int64_t> next(size_t(E), 0);  // the next row of each expert
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + count[size_t(e - 1)];
  int32_t* rt = row_token.data<int32_t>();
  int32_t* rs = row_slot.data<int32_t>();
  int32_t* sr = slot_row.data<int32_t>();
  for (int64_t i = 0; i < NK; ++i) {
    const int64_t r = next[size_t(ids[i])]++;
    sr[i] = int32_t(r);
    rt[r] = int32_t(i / K);
    rs[r] = int32_t(i);
  }
  int32_t* tr = token_rows.data<int32_t>();
  for (int64_t t = 0; t < NK / std::max<int64_t>(K, 1); ++t) {
    std::copy(sr + t * K, sr + (t + 1) * K, tr + t * K);
    std::sort(tr + t * K, tr + (t + 1) * K);
  }
  int32_t* c = counts.data<int32_t>();
  int32_t* o = offsets.data<int32_t>();
  o[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    c[e] += int32_t(count[size_t(e)]);
    o[e + 1] = o[e] + int32_t(count[size_t(e)]);
  }
}

void moe_plan_capacity(Exec&, Tensor& counts, Tensor& offsets, Tensor& row_token, Tensor& row_prob,
                       Tensor& token_offsets, Tensor& token_rows, Tensor& prob_offsets, Tensor& prob_rows,
                       const Tensor& top, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       bool drop_by_position, bool pad_to_capacity, int64_t pad_multiple) {
  const int64_t N = top.size(0), K = top.size(1), NK = top.numel(), E = num_experts;
  const int32_t* ids = top.data<int32_t>();
  auto prob = [&](int64_t i) {
    return probs.dtype() == DType::F64 ? probs.data<double>()[i] : double(probs.data<float>()[i]);
  };
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));  // each expert's choices, in token order
  for (int64_t i = 0; i < NK; ++i) {
    HYTRA_CHECK(ids[i] >= 0 && ids[i] < E, "moe_plan_capacity: expert id ", ids[i], " at choice ", i,
                " is outside [0, ", E, ")");
    routed[size_t(ids[i])].push_back(i);
  }
  const int64_t cap = capacity > 0 ? std::min(capacity, N) : N;
  std::vector<int32_t> rt, rp;  // the used rows' tokens and choices
  int32_t* o = offsets.data<int32_t>();
  int32_t* c = counts.data<int32_t>();
  std::vector<char> held(static_cast<size_t>(N));
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> keep = routed[size_t(e)];
    if (int64_t(keep.size()) > cap) {
      if (!drop_by_position)  // the best probabilities first; stable, so ties keep the lower token
        std::stable_sort(keep.begin(), keep.end(), [&](int64_t a, int64_t b) { return prob(a) > prob(b); });
      keep.resize(size_t(cap));
      std::sort(keep.begin(), keep.end());  // choice order is token order
    }
    c[e] += int32_t(keep.size());
    int64_t target = pad_to_capacity ? cap : int64_t(keep.size());
    if (pad_multiple > 0) target = (target + pad_multiple - 1) / pad_multiple * pad_multiple;
    int64_t pad = std::min(target, N) - int64_t(keep.size());
    std::fill(held.begin(), held.end(), 0);
    for (int64_t i : keep) held[size_t(i / K)] = 1;
    o[e] = int32_t(rt.size());
    size_t next = 0;  // the next kept choice
    for (int64_t t = 0; t < N; ++t) {
      if (held[size_t(t)]) {
        rt.push_back(int32_t(t));
        rp.push_back(int32_t(keep[next++]));
      } else if (pad > 0) {
        --pad;
        rt.push_back(int32_t(t));
        rp.push_back(int32_t(NK));
      }
    }
  }
  const int64_t R = int64_t(rt.size()), R_max = row_token.numel();
  HYTRA_CHECK(R <= R_max, "moe_plan_capacity: the plan needs ", R, " rows, more than the bound ", R_max);
  o[E] = int32_t(R);
  std::vector<std::vector<int32_t>> by_token(static_cast<size_t>(N));  // rows ascending: appended in row order
  std::vector<int32_t> choice_row(size_t(NK), -1);
  for (int64_t r = 0; r < R; ++r) {
    by_token[size_t(rt[size_t(r)])].push_back(int32_t(r));
    if (rp[size_t(r)] < NK) choice_row[size_t(rp[size_t(r)])] = int32_t(r);
  }
  int32_t *tok = row_token.data<int32_t>(), *slot = row_prob.data<int32_t>();
  int32_t *t_off = token_offsets.data<int32_t>(), *t_rows = token_rows.data<int32_t>();
  int32_t *p_off = prob_offsets.data<int32_t>(), *p_rows = prob_rows.data<int32_t>();
  std::fill(tok, tok + R_max, 0);
  std::fill(slot, slot + R_max, int32_t(NK));
  std::copy(rt.begin(), rt.end(), tok);
  std::copy(rp.begin(), rp.end(), slot);
  std::fill(t_rows, t_rows + R_max, 0);
  t_off[0] = 0;
  for (int64_t t = 0; t < N; ++t) {
    std::copy(by_token[size_t(t)].begin(), by_token[size_t(t)].end(), t_rows + t_off[t]);
    t_off[t + 1] = t_off[t] + int32_t(by_token[size_t(t)].size());
  }
  std::fill(p_rows, p_rows + NK, 0);
  p_off[0] = 0;
  for (int64_t i = 0; i < NK; ++i) {
    const int32_t r = choice_row[size_t(i)];
    if (r >= 0) p_rows[p_off[i]] = r;
    p_off[i + 1] = p_off[i] + (r >= 0);
  }
}

}  // namespace hytra::cpu
