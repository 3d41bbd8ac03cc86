// Token dispatch for one rank (docs/spec/moe.md §3-§4; the seam where expert parallelism's all-to-all
// goes): the router's top-k choices become a DispatchPlan — capacity dropping, padding, and a
// permutation of rows in expert order with token order kept inside each expert — whose index tensors
// drive ops::gather_rows (permute) and ops::scatter_add_rows (un-permute as a plain scatter-add, and
// every backward). The plan is built where the routing is and nothing comes back to the host (the experts
// read their row offsets on the device): ops::moe_plan_dropless without capacity or padding, else
// ops::moe_plan_capacity, whose plan has a static row count R_max (ops::moe_capacity_rows) of which the
// first offsets[E] are used, so CUDA graphs can capture it (the tests compare both with a host-built plan,
// tests/unit/host_dispatch_plan.h).
//   capacity (factor c > 0): ceil(N k / E * c) rows per expert; an expert routed more tokens keeps
//     the capacity best by probability (drop policy probs; ties to the lower token) or the first by
//     position; with pad_to_capacity every expert gets exactly `capacity` rows, the missing ones
//     filled with the lowest-index tokens it does not hold (probability 0);
//   pad_multiple > 0 (--moe-router-padding-for-quantization): each expert's row count is padded to
//     a multiple by adding the lowest-index tokens it does not hold, with probability 0.
// Padding rows compute act(h) * 0 = 0 and add nothing; dropped choices get probability gradient 0.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra {

struct DispatchOptions {
  int64_t num_experts = 0, topk = 0;  // E, k (model/layer_kinds.cpp sets them from the config)
  double capacity_factor = -1.0;  // < 0: dropless
  bool drop_by_position = false;  // --moe-token-drop-policy position
  bool pad_to_capacity = false;
  int64_t pad_multiple = 0;       // 0: no padding for quantization
};

struct DispatchPlan {
  int64_t rows = 0;                         // R (plan_capacity: R_max, of which offsets[E] are used)
  Tensor expert_offsets;                    // (E+1) int32: expert e's rows [offsets[e], offsets[e+1])
  Tensor row_token;                         // (R) int32: the token each row carries
  Tensor row_prob;                          // (R) int32: t*K + j of the row's choice, N*K for padding
  Tensor token_offsets, token_rows;         // CSR (N+1), (R): each token's rows, ascending
  Tensor prob_offsets, prob_rows;           // CSR (N*K+1), (kept): the row of each kept choice
};

// Megatron's capacity ceil(N k / E x factor), capped at N; 0 without a capacity factor.
int64_t expert_capacity(int64_t N, const DispatchOptions& opt);

// Whether plan_dropless applies: no capacity, no padding.
bool plan_is_dropless(const DispatchOptions& opt);
// A dropless plan's CSR offsets depend on N and K alone (every token has K rows, every choice one: t*K and
// i): the caller keeps them, and plan_dropless rebuilds them only when N or K change.
struct DroplessOffsets {
  Tensor token_offsets, prob_offsets;
};
// The plan for such options (ops::moe_plan_dropless), from the router's top (N,K) int32 on ex's device;
// token_counts (E) int32 += each expert's routed tokens.
DispatchPlan plan_dropless(Exec& ex, const Tensor& top, const DispatchOptions& opt, DroplessOffsets& offsets,
                           Tensor& token_counts);

// The plan for options with capacity or padding, built on the device without host synchronisation
// (ops::moe_plan_capacity): rows = R_max, the rows from expert_offsets[E] on unused (token 0, choice N*K, in no
// expert's group and no CSR). top (N,K) int32 and probs (N,K) fp32 (fp64 on the CPU) on ex's device;
// token_counts (E) int32 += each expert's kept tokens.
DispatchPlan plan_capacity(Exec& ex, const Tensor& top, const Tensor& probs, const DispatchOptions& opt,
                           Tensor& token_counts);

}  // namespace hytra
