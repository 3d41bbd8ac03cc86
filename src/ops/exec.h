// Exec: where and how ops run — the device, its backend, the CUDA stream (opaque here), and the
// determinism flag. Passed first to every op. Layers get one from the StepContext.
#pragma once
#include "core/device.h"

namespace hytra {

struct Backend;

class Exec {
 public:
  // The CPU executor (process-wide, uses the global thread pool).
  static Exec& cpu();
  // The CUDA executor on the current device; a clear error in builds or machines without CUDA.
  static Exec& cuda();
  static Exec& for_device(Device d) { return d == Device::CPU ? cpu() : cuda(); }

  Exec(Device device, Backend* backend) : device_(device), backend_(backend) {}
  Device device() const { return device_; }
  Backend& backend() const { return *backend_; }
  void* stream() const { return stream_; }  // cudaStream_t on CUDA, null on CPU
  void set_stream(void* s) { stream_ = s; }
  bool deterministic() const { return deterministic_; }
  // Blocks until all queued work on this executor is done (no-op on CPU).
  void synchronize() const;

 private:
  Device device_;
  Backend* backend_;
  void* stream_ = nullptr;
  bool deterministic_ = true;
};

}  // namespace hytra
