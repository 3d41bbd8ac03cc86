// STUB: moe_dispatch ops, to be written.
#include "ops/cuda/cuda_ops.h"
#include "core/error.h"

namespace hytra::cuda {

void gather_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx) {
  HYTRA_CHECK(false, "gather_rows: not implemented on cuda yet");
}

void scatter_add_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows) {
  HYTRA_CHECK(false, "scatter_add_rows: not implemented on cuda yet");
}

void moe_act_fwd(Exec& ex, Tensor& y, const Tensor& h, const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) {
  HYTRA_CHECK(false, "moe_act_fwd: not implemented on cuda yet");
}

void moe_act_bwd(Exec& ex, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) {
  HYTRA_CHECK(false, "moe_act_bwd: not implemented on cuda yet");
}

}  // namespace hytra::cuda
