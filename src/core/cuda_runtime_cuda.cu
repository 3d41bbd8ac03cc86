// CUDA pieces of core: device query, copies, and the caching allocator.
// The allocator keeps freed blocks in size-keyed free lists (sizes rounded up to 512 B, or to
// 2 MiB above 1 MiB) and reuses the smallest cached block that fits, so a steady training step
// performs no cudaMalloc/cudaFree. Statistics: bytes in use, peak, reserved. Blocks belong to a
// pool: 0 is shared; a CUDA graph captures with its own (cuda_allocator_use_pool), so the addresses
// it replays into are never handed to other work.
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>

#include "core/allocator.h"
#include "core/cuda_check_cuda.h"
#include "core/error.h"
#include "core/tensor.h"

namespace hytra {

void cuda_check(cudaError_t status, const char* what) {
  HYTRA_CHECK(status == cudaSuccess, "CUDA error in ", what, ": ", cudaGetErrorString(status));
}

namespace {

size_t round_size(size_t bytes) {
  if (bytes == 0) return 512;
  if (bytes <= (size_t(1) << 20)) return (bytes + 511) / 512 * 512;
  size_t two_mib = size_t(2) << 20;
  return (bytes + two_mib - 1) / two_mib * two_mib;
}

class CudaCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    auto& free = free_[pool_];
    auto it = free.lower_bound(size);
    // Reuse a cached block unless it is much larger than asked (keeps fragmentation bounded).
    if (it != free.end() && it->first <= size * 2) {
      size = it->first;
      p = it->second;
      free.erase(it);
    } else {
      cudaError_t e = cudaMalloc(&p, size);
      if (e != cudaSuccess && pool_ == 0) {  // release the shared cache once and retry (not while a
        (void)cudaGetLastError();            // graph is being captured: that needs a device sync)
        release_cached_locked();
        e = cudaMalloc(&p, size);
      }
      HYTRA_CHECK(e == cudaSuccess, "out of GPU memory allocating ", bytes, " bytes (", s_.reserved,
                  " bytes reserved, ", s_.in_use, " in use", pool_ != 0 ? ", while capturing a CUDA graph: "
                  "--no-cuda-graph needs less memory" : "", "): ", cudaGetErrorString(e));
      s_.reserved += int64_t(size);
    }
    blocks_[p] = {size, pool_};
    s_.in_use += int64_t(size);
    s_.num_allocs++;
    if (s_.in_use > s_.peak) s_.peak = s_.in_use;
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;
    s_.in_use -= int64_t(it->second.size);
    free_[it->second.pool].emplace(it->second.size, ptr);  // back to the pool it came from
    blocks_.erase(it);
  }
  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return s_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    s_.peak = s_.in_use;
  }
  void use_pool(int pool) {
    std::lock_guard<std::mutex> lock(mu_);
    pool_ = pool;
  }
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached_locked();
  }

 private:
  // Frees the shared pool's cached blocks (a private pool's blocks stay: a graph replays into them).
  void release_cached_locked() {
    cudaDeviceSynchronize();
    for (auto& [size, p] : free_[0]) {
      cudaFree(p);
      s_.reserved -= int64_t(size);
    }
    free_[0].clear();
  }
  struct Block {
    size_t size;
    int pool;
  };
  mutable std::mutex mu_;
  std::map<int, std::multimap<size_t, void*>> free_;  // per pool: cached blocks by size
  std::map<void*, Block> blocks_;                     // handed out
  int pool_ = 0;                                      // where allocations come from now
  MemoryStats s_;
};

__global__ void probe_kernel() {}

// A build without code for the device (HYTRA_CUDA_ARCH leaves it out, and the PTX is for a newer one) would fail at
// its first kernel; say why instead.
void check_device_code() {
  cudaFuncAttributes attr{};
  const cudaError_t st = cudaFuncGetAttributes(&attr, probe_kernel);
  (void)cudaGetLastError();
  if (st != cudaErrorNoKernelImageForDevice && st != cudaErrorInvalidDeviceFunction) return cuda_check(st, "probe");
  int dev = 0, major = 0, minor = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  fail(str("this hytra has no CUDA code for the device (compute capability ", major, ".", minor,
           "): rebuild with its architecture in HYTRA_CUDA_ARCH (e.g. -DHYTRA_CUDA_ARCH=\"", major, minor, ";90a\")"));
}

CudaCachingAllocator& caching_allocator() {
  HYTRA_CHECK(cuda_available(), "no CUDA device is available (device 'cuda' was requested)");
  static const bool checked = (check_device_code(), true);
  (void)checked;
  static CudaCachingAllocator a;
  return a;
}

cudaMemcpyKind kind_of(Device dst, Device src) {
  if (dst == Device::CPU && src == Device::CPU) return cudaMemcpyHostToHost;
  if (dst == Device::CUDA && src == Device::CPU) return cudaMemcpyHostToDevice;
  if (dst == Device::CPU && src == Device::CUDA) return cudaMemcpyDeviceToHost;
  return cudaMemcpyDeviceToDevice;
}

}  // namespace

bool cuda_available() {
  static const bool ok = [] {
    int n = 0;
    bool any = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    (void)cudaGetLastError();
    return any;
  }();
  return ok;
}

void cuda_stream_synchronize(void* stream) {
  cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

Allocator& cuda_allocator() { return caching_allocator(); }

void cuda_allocator_use_pool(int pool) { caching_allocator().use_pool(pool); }

void cuda_allocator_release_cached() { caching_allocator().release_cached(); }

void cuda_select_device(int local_rank, int local_ranks) {
  int n = 0;
  cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  HYTRA_CHECK(n > 0 && local_ranks <= n && local_rank < n, local_ranks, " ranks on this node (local rank ",
              local_rank, ") but ", n, " visible GPUs: one rank a GPU (check the launcher's ranks per node and ",
              "CUDA_VISIBLE_DEVICES)");
  cuda_check(cudaSetDevice(local_rank), "cudaSetDevice");
}

void* cuda_stream_create() {
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreate(&s), "cudaStreamCreate");  // blocking: ordered with the legacy stream
  return s;
}

void* cuda_event_create() {
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreate(&e), "cudaEventCreate");
  return e;
}

void cuda_event_destroy(void* event) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void cuda_event_record(void* event, void* stream) {
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}

double cuda_event_elapsed_ms(void* from, void* to) {
  cuda_check(cudaEventSynchronize(static_cast<cudaEvent_t>(to)), "cudaEventSynchronize");
  float ms = 0.0f;
  cuda_check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)),
             "cudaEventElapsedTime");
  return double(ms);
}

void memcpy_any(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_dev == Device::CPU && src_dev == Device::CPU) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  cuda_check(cudaMemcpy(dst, src, nbytes, kind_of(dst_dev, src_dev)), "cudaMemcpy");
}

void memcpy_to_device_async(void* dst, const void* src, size_t nbytes, void* stream) {
  if (nbytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
             "cudaMemcpyAsync");
}

void memcpy_to_host_async(void* dst, const void* src, size_t nbytes, void* stream) {
  if (nbytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
             "cudaMemcpyAsync");
}

void cuda_event_synchronize(void* event) {
  cuda_check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
}

void* cuda_host_alloc(size_t nbytes) {
  void* p = nullptr;
  cuda_check(cudaMallocHost(&p, nbytes), "cudaMallocHost");
  return p;
}

void cuda_host_free(void* p) {
  if (p != nullptr) (void)cudaFreeHost(p);
}

void memset_any(void* dst, Device dev, int value, size_t nbytes) {
  if (nbytes == 0) return;
  if (dev == Device::CPU) {
    std::memset(dst, value, nbytes);
    return;
  }
  cuda_check(cudaMemset(dst, value, nbytes), "cudaMemset");
}

}  // namespace hytra
