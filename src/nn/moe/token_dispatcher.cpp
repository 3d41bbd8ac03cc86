#include "nn/moe/token_dispatcher.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/int_tensor.h"
#include "ops/ops.h"

namespace hytra {

namespace {
Tensor int_tensor(const std::vector<int32_t>& v, Device device) { return int32_tensor(v, {int64_t(v.size())}, device); }
}  // namespace

int64_t expert_capacity(int64_t N, const DispatchOptions& o) {
  if (o.capacity_factor <= 0) return 0;
  // Megatron's ceil(N K / E x factor), capped at N: an expert holds a token at most once, and a huge
  // factor must not overflow the conversion.
  const double want = std::ceil(double(N * o.topk) / double(o.num_experts) * o.capacity_factor);
  return want < double(N) ? int64_t(want) : N;
}

bool plan_is_dropless(const DispatchOptions& o) { return o.capacity_factor <= 0 && o.pad_multiple == 0; }

DispatchPlan plan_dropless(Exec& ex, const Tensor& top, const DispatchOptions& o, DroplessOffsets& offsets,
                           Tensor& token_counts) {
  HYTRA_ASSERT(plan_is_dropless(o), "plan_dropless with capacity or padding");
  const int64_t N = top.size(0), K = top.size(1), E = o.num_experts;
  const Device dev = top.device();
  DispatchPlan plan;
  plan.rows = N * K;
  plan.expert_offsets = Tensor::empty({E + 1}, DType::I32, dev);
  plan.row_token = Tensor::empty({N * K}, DType::I32, dev);
  plan.row_prob = Tensor::empty({N * K}, DType::I32, dev);
  plan.prob_rows = Tensor::empty({N * K}, DType::I32, dev);
  plan.token_rows = Tensor::empty({N * K}, DType::I32, dev);
  ops::moe_plan_dropless(ex, token_counts, plan.expert_offsets, plan.row_token, plan.row_prob, plan.prob_rows,
                         plan.token_rows, top, E);
  Tensor& t_off = offsets.token_offsets;
  if (!t_off.defined() || t_off.numel() != N + 1 || offsets.prob_offsets.numel() != N * K + 1 ||
      t_off.device() != dev) {
    std::vector<int32_t> t(size_t(N + 1)), p(size_t(N * K + 1));
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(int64_t(i) * K);
    for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(i);
    t_off = int_tensor(t, dev);
    offsets.prob_offsets = int_tensor(p, dev);
  }
  plan.token_offsets = t_off;
  plan.prob_offsets = offsets.prob_offsets;
  return plan;
}

DispatchPlan plan_capacity(Exec& ex, const Tensor& top, const Tensor& probs, const DispatchOptions& o,
                           Tensor& token_counts) {
  const int64_t N = top.size(0), K = top.size(1), E = o.num_experts, NK = N * K;
  const int64_t capacity = expert_capacity(N, o);
  const bool pad_to_capacity = o.pad_to_capacity && capacity > 0;
  const Device dev = top.device();
  DispatchPlan plan;
  plan.rows = ops::moe_capacity_rows(N, K, E, capacity, pad_to_capacity, o.pad_multiple);
  plan.expert_offsets = Tensor::empty({E + 1}, DType::I32, dev);
  plan.row_token = Tensor::empty({plan.rows}, DType::I32, dev);
  plan.row_prob = Tensor::empty({plan.rows}, DType::I32, dev);
  plan.token_offsets = Tensor::empty({N + 1}, DType::I32, dev);
  plan.token_rows = Tensor::empty({plan.rows}, DType::I32, dev);
  plan.prob_offsets = Tensor::empty({NK + 1}, DType::I32, dev);
  plan.prob_rows = Tensor::empty({NK}, DType::I32, dev);
  ops::moe_plan_capacity(ex, token_counts, plan.expert_offsets, plan.row_token, plan.row_prob, plan.token_offsets,
                         plan.token_rows, plan.prob_offsets, plan.prob_rows, top, probs.view({N, K}), E, capacity,
                         o.drop_by_position, pad_to_capacity, o.pad_multiple);
  return plan;
}

}  // namespace hytra
