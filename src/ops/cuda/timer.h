// Timing on the GPU for benchmarks: CUDA events recorded on an executor's stream, and the
// device's name for benchmark records. No CUDA types here, so host programs can include it.
#pragma once
#include <string>

namespace hytra::cuda {

class EventTimer {
 public:
  explicit EventTimer(void* stream);  // a cudaStream_t (null = the default stream)
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  // Records the stop event, waits for it, returns the milliseconds since start().
  float stop_ms();

 private:
  void* stream_;
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// Name of the current CUDA device ("NVIDIA H100 80GB HBM3").
std::string device_name();

}  // namespace hytra::cuda
