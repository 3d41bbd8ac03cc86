// STUB: gdn ops, to be written.
#include "ops/cuda/cuda_ops.h"
#include "core/error.h"

namespace hytra::cuda {

void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) {
  HYTRA_CHECK(false, "gated_delta_rule_fwd: not implemented on cuda yet");
}

void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw, Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) {
  HYTRA_CHECK(false, "gated_delta_rule_bwd: not implemented on cuda yet");
}

}  // namespace hytra::cuda
