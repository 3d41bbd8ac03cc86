// STUB: conv1d ops, to be written.
#include "ops/cpu/cpu_ops.h"
#include "core/error.h"

namespace hytra::cpu {

void conv1d_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  HYTRA_CHECK(false, "conv1d_fwd: not implemented on cpu yet");
}

void conv1d_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  HYTRA_CHECK(false, "conv1d_bwd: not implemented on cpu yet");
}

}  // namespace hytra::cpu
