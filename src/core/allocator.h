// Allocators. The CPU one is plain aligned malloc; the CUDA one (cuda_runtime_cuda.cu) caches
// freed blocks by size so steady-state training never calls cudaMalloc. Both keep statistics:
// bytes in use now and the peak since the last reset, which tests and `hytra bench` read.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace hytra {

struct MemoryStats {
  int64_t in_use = 0;     // bytes handed out and not yet freed
  int64_t peak = 0;       // max of in_use since reset_peak()
  int64_t reserved = 0;   // bytes held from the system (cached blocks included)
  int64_t num_allocs = 0; // successful allocate() calls
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
};

Allocator& cpu_allocator();
// Throws a clear error in builds without CUDA.
Allocator& cuda_allocator();
// CUDA allocations from now on come from (and return to) `pool`: 0 is the shared pool, another
// number a private one (a CUDA graph's: its blocks are never reused by work outside the graph).
void cuda_allocator_use_pool(int pool);
// Frees the shared pool's cached blocks (cudaFree; waits for the device first).
void cuda_allocator_release_cached();
Allocator& allocator_for(Device d);

}  // namespace hytra
