// Status checks for CUDA runtime calls, shared by core and the CUDA ops. Every runtime call's
// status goes through cuda_check, which throws hytra::Error naming the call and CUDA's message.
#pragma once
#include <cuda_runtime_api.h>

namespace hytra {

void cuda_check(cudaError_t status, const char* what);

}  // namespace hytra

// HYTRA_CUDA_CHECK(cudaMemcpyAsync(...)): the error message quotes the failing call.
#define HYTRA_CUDA_CHECK(call) ::hytra::cuda_check((call), #call)
