// The mHC mapping projection, CPU reference (ops.def mhc_proj_fwd / mhc_proj_bwd): plain GEMMs in w's dtype
// (the streams converted to it first when they are stored in another).
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace hytra::cpu {
namespace {
// x in w's dtype (a copy when it differs).
Tensor in_dtype_of(Exec& ex, const Tensor& x, const Tensor& w) {
  if (x.dtype() == w.dtype()) return x;
  Tensor c = Tensor::empty(x.shape(), w.dtype(), x.device());
  ops::copy(ex, c, x);
  return c;
}
}  // namespace

void mhc_proj_fwd(Exec& ex, Tensor& proj, const Tensor& x, const Tensor& w) {
  ops::gemm(ex, proj, in_dtype_of(ex, x, w), w, false, true, 1.0f, 0.0f);
}

void mhc_proj_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dproj, const Tensor& x, const Tensor& w) {
  ops::gemm(ex, dw, dproj, in_dtype_of(ex, x, w), true, false, 1.0f, 1.0f);
  if (dx.dtype() == w.dtype()) {
    ops::gemm(ex, dx, dproj, w, false, false, 1.0f, 1.0f);
    return;
  }
  Tensor t = Tensor::empty(dx.shape(), w.dtype(), dx.device());
  ops::gemm(ex, t, dproj, w, false, false, 1.0f, 0.0f);
  ops::axpy(ex, dx, t, 1.0);
}

}  // namespace hytra::cpu
