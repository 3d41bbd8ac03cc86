// CPU-only builds: asking for the CUDA backend is a clear error; there are no CUDA GEMMs to tune.
#include "core/error.h"
#include "ops/backend.h"
#include "ops/gemm_choice.h"

namespace hytra {

Backend& cuda_backend() { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }

namespace ops {
void set_gemm_tuning(bool) {}
void forget_gemm_algorithms() {}
int64_t gemm_candidates_compared() { return 0; }
}  // namespace ops

}  // namespace hytra
