// CPU-only builds: the CUDA entry points of core answer "no GPU" or fail clearly.
#include <cstring>

#include "core/allocator.h"
#include "core/cuda_graph.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/tensor.h"

namespace hytra {

bool cuda_available() { return false; }

// (NVTX comes with the CUDA toolkit; --profile-nvtx refuses a build without it.)
bool nvtx_available() { return false; }
void nvtx_push(const char*) {}
void nvtx_pop() {}

void cuda_stream_synchronize(void*) {}

Allocator& cuda_allocator() { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
void cuda_allocator_use_pool(int) { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
void cuda_allocator_release_cached() {}
void cuda_select_device(int, int) { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
void* cuda_stream_create() { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }

void* cuda_event_create() { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
void cuda_event_destroy(void*) {}
void cuda_event_record(void*, void*) { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
double cuda_event_elapsed_ms(void*, void*) {
  fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)");
}

void memcpy_any(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  HYTRA_CHECK(dst_dev == Device::CPU && src_dev == Device::CPU,
              "this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)");
  if (nbytes) std::memcpy(dst, src, nbytes);
}

void memcpy_to_device_async(void*, const void*, size_t, void*) {
  fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)");
}

void memcpy_to_host_async(void*, const void*, size_t, void*) {
  fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)");
}
void cuda_event_synchronize(void*) { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
void* cuda_host_alloc(size_t) { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }
void cuda_host_free(void*) {}

void memset_any(void* dst, Device dev, int value, size_t nbytes) {
  HYTRA_CHECK(dev == Device::CPU, "this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)");
  if (nbytes) std::memset(dst, value, nbytes);
}

CudaGraph::~CudaGraph() = default;
void CudaGraph::capture(void*, int, const std::function<void()>&) {
  fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)");
}
void CudaGraph::replay(void*) { fail("this hytra build has no CUDA backend (configure with -DHYTRA_CUDA=ON)"); }

}  // namespace hytra
