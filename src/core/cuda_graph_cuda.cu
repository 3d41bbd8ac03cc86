#include <cuda_runtime.h>

#include "core/allocator.h"
#include "core/cuda_check_cuda.h"
#include "core/cuda_graph.h"
#include "core/error.h"

namespace hytra {

CudaGraph::~CudaGraph() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CudaGraph::capture(void* stream, int pool, const std::function<void()>& work) {
  HYTRA_ASSERT(exec_ == nullptr, "CudaGraph captured twice");
  HYTRA_ASSERT(stream != nullptr && pool > 0, "CudaGraph needs a stream of its own and a private pool");
  auto s = static_cast<cudaStream_t>(stream);
  cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  cuda_allocator_use_pool(pool);
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    cuda_allocator_use_pool(0);
    (void)cudaStreamEndCapture(s, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  cuda_allocator_use_pool(0);
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (end != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    cuda_check(end, "cudaStreamEndCapture (an operation in the captured work cannot be captured)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    cuda_check(inst, "cudaGraphInstantiate");
  }
  graph_ = graph;
  exec_ = exec;
}

void CudaGraph::replay(void* stream) {
  HYTRA_ASSERT(exec_ != nullptr, "CudaGraph replayed before a capture");
  cuda_check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)),
             "cudaGraphLaunch");
}

}  // namespace hytra
