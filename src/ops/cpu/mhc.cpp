// STUB: mhc ops, to be written.
#include "ops/cpu/cpu_ops.h"
#include "core/error.h"

namespace hytra::cpu {

void sinkhorn_fwd(Exec& ex, Tensor& M, const Tensor& logits, int64_t iterations, ops::MhcVariant variant) {
  HYTRA_CHECK(false, "sinkhorn_fwd: not implemented on cpu yet");
}

void sinkhorn_bwd(Exec& ex, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations, ops::MhcVariant variant) {
  HYTRA_CHECK(false, "sinkhorn_bwd: not implemented on cpu yet");
}

void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& x, const Tensor& proj, const Tensor& alpha, const Tensor& bias, int64_t iterations, ops::MhcVariant variant) {
  HYTRA_CHECK(false, "mhc_coeffs_fwd: not implemented on cpu yet");
}

void mhc_coeffs_bwd(Exec& ex, Tensor& dx, Tensor& dproj, Tensor& dalpha, Tensor& dbias, const Tensor& dh_pre, const Tensor& dh_post, const Tensor& dh_res, const Tensor& x, const Tensor& proj, const Tensor& alpha, const Tensor& bias, const Tensor& r, int64_t iterations, ops::MhcVariant variant) {
  HYTRA_CHECK(false, "mhc_coeffs_bwd: not implemented on cpu yet");
}

}  // namespace hytra::cpu
