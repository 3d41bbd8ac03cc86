// STUB: moe_router ops, to be written.
#include "ops/cuda/cuda_ops.h"
#include "core/error.h"

namespace hytra::cuda {

void moe_router_fwd(Exec& ex, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k, ops::RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk, double scaling) {
  HYTRA_CHECK(false, "moe_router_fwd: not implemented on cuda yet");
}

void moe_router_bwd(Exec& ex, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top, ops::RouterScore score, bool pre_softmax, double scaling) {
  HYTRA_CHECK(false, "moe_router_bwd: not implemented on cuda yet");
}

void moe_aux_loss(Exec& ex, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits, const Tensor& global_counts, int64_t k, ops::RouterScore score, int64_t num_seqs, double coeff, double grad_scale) {
  HYTRA_CHECK(false, "moe_aux_loss: not implemented on cuda yet");
}

void moe_z_loss(Exec& ex, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale) {
  HYTRA_CHECK(false, "moe_z_loss: not implemented on cuda yet");
}

}  // namespace hytra::cuda
