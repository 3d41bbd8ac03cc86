// STUB: mhc_mix ops, to be written.
#include "ops/cuda/cuda_ops.h"
#include "core/error.h"

namespace hytra::cuda {

void mhc_aggregate_fwd(Exec& ex, Tensor& u, const Tensor& X, const Tensor& h_pre) {
  HYTRA_CHECK(false, "mhc_aggregate_fwd: not implemented on cuda yet");
}

void mhc_aggregate_bwd(Exec& ex, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre) {
  HYTRA_CHECK(false, "mhc_aggregate_bwd: not implemented on cuda yet");
}

void mhc_combine_fwd(Exec& ex, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  HYTRA_CHECK(false, "mhc_combine_fwd: not implemented on cuda yet");
}

void mhc_combine_bwd(Exec& ex, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  HYTRA_CHECK(false, "mhc_combine_bwd: not implemented on cuda yet");
}

}  // namespace hytra::cuda
