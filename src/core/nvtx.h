// NVTX ranges for Nsight Systems and Nsight Compute users (--profile-nvtx): one per op call, per sub-layer's
// forward, backward and delayed weight gradients, and per training phase. NVTX is header-only and comes with the
// CUDA toolkit: a build without CUDA has none (nvtx_available() is false). The ranges are host-side: under CUDA-graph
// replay they mark the capture only (run with --no-cuda-graph to see them around every kernel).
#pragma once
#include <string>

namespace hytra {

// Set by --profile-nvtx; off, a range costs one branch.
inline bool nvtx_enabled = false;

bool nvtx_available();
void nvtx_push(const char* name);
void nvtx_pop();

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) : on_(nvtx_enabled) {
    if (on_) nvtx_push(name);
  }
  // `name` + `suffix`, built only when the ranges are on.
  NvtxRange(const std::string& name, const char* suffix) : on_(nvtx_enabled) {
    if (on_) nvtx_push((name + suffix).c_str());
  }
  ~NvtxRange() {
    if (on_) nvtx_pop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool on_;
};

}  // namespace hytra
