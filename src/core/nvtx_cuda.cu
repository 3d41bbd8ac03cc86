// NVTX ranges through the CUDA toolkit's header-only NVTX 3 (core/nvtx.h).
#include <nvtx3/nvToolsExt.h>

#include "core/nvtx.h"

namespace hytra {

bool nvtx_available() { return true; }
void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace hytra
