// CudaGraph: the kernels one piece of host code queues on a CUDA stream, captured once into a CUDA
// graph and then replayed with a single launch (docs/ARCHITECTURE.md "One training step": the training
// micro-batch). Capture runs the host code without running its kernels (relaxed mode, so the
// caching allocator may still cudaMalloc); allocations made during it come from a private pool of the
// CUDA allocator, so the addresses the graph replays into are never handed to other work. A replay
// repeats exactly the captured kernels with the captured arguments and addresses: inputs go into the
// buffers the capture read, outputs are read from the tensors it wrote.
#pragma once
#include <functional>

namespace hytra {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures what `work` queues on `stream` (a non-default stream), allocating from `pool` (> 0).
  // If `work` throws or the capture fails, the capture is ended, the stream stays usable and the
  // error is rethrown (naming the CUDA error).
  void capture(void* stream, int pool, const std::function<void()>& work);
  bool captured() const { return exec_ != nullptr; }
  // Launches the captured graph on `stream`.
  void replay(void* stream);

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace hytra
