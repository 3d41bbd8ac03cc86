// CPU allocator: 64-byte aligned blocks from the system, with in-use/peak statistics.
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/allocator.h"
#include "core/error.h"

namespace hytra {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    HYTRA_CHECK(p != nullptr, "out of CPU memory allocating ", bytes, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    s_.in_use += int64_t(bytes);
    s_.reserved += int64_t(bytes);
    s_.num_allocs++;
    if (s_.in_use > s_.peak) s_.peak = s_.in_use;
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    std::free(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    s_.in_use -= int64_t(bytes);
    s_.reserved -= int64_t(bytes);
  }
  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return s_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    s_.peak = s_.in_use;
  }

 private:
  mutable std::mutex mu_;
  MemoryStats s_;
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

Allocator& allocator_for(Device d) { return d == Device::CPU ? cpu_allocator() : cuda_allocator(); }

}  // namespace hytra
