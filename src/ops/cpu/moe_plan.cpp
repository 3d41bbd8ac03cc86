// The dropless dispatch plan, CPU reference (ops.def moe_plan_dropless): a stable counting sort of the
// (token, choice) pairs by expert. Row of choice i = t*K + j with expert e: the rows of the experts before e,
// plus the choices before i routed to e.
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

}  // namespace hytra::cpu
