// STUB: gated_rmsnorm ops, to be written.
#include "ops/cpu/cpu_ops.h"
#include "core/error.h"

namespace hytra::cpu {

void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, double eps, bool norm_before_gate) {
  HYTRA_CHECK(false, "gated_rmsnorm_fwd: not implemented on cpu yet");
}

void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate) {
  HYTRA_CHECK(false, "gated_rmsnorm_bwd: not implemented on cpu yet");
}

}  // namespace hytra::cpu
