// CUDA-event timer and device name for the benchmarks (timer.h).
#include <cuda_runtime.h>

#include "core/cuda_check_cuda.h"
#include "ops/cuda/timer.h"

namespace hytra::cuda {

EventTimer::EventTimer(void* stream) : stream_(stream) {
  cudaEvent_t a = nullptr, b = nullptr;
  HYTRA_CUDA_CHECK(cudaEventCreate(&a));
  HYTRA_CUDA_CHECK(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start() {
  HYTRA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream_)));
}

float EventTimer::stop_ms() {
  auto stop = static_cast<cudaEvent_t>(stop_);
  HYTRA_CUDA_CHECK(cudaEventRecord(stop, static_cast<cudaStream_t>(stream_)));
  HYTRA_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  HYTRA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), stop));
  return ms;
}

std::string device_name() {
  int dev = 0;
  HYTRA_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  HYTRA_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

}  // namespace hytra::cuda
