// STUB: ssd ops, to be written.
#include "ops/cpu/cpu_ops.h"
#include "core/error.h"

namespace hytra::cpu {

void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size) {
  HYTRA_CHECK(false, "ssd_chunk_scan_fwd: not implemented on cpu yet");
}

void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log, Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size) {
  HYTRA_CHECK(false, "ssd_chunk_scan_bwd: not implemented on cpu yet");
}

}  // namespace hytra::cpu
