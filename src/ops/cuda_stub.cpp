// CPU-only builds: asking for the CUDA backend is a clear error.
#include "core/error.h"
#include "ops/backend.h"

namespace hytra {

Backend& cuda_backend() { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }

}  // namespace hytra
