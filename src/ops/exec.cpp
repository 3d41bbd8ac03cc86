#include "ops/exec.h"

#include "ops/backend.h"

namespace hytra {

Exec& Exec::cpu() {
  static Exec ex(Device::CPU, &cpu_backend());
  return ex;
}

void Exec::synchronize() const {
  if (device_ == Device::CUDA) cuda_stream_synchronize(stream_);
}

Exec& Exec::cuda() {
  // Work runs on a stream of its own (not the legacy default stream, which cannot be captured into
  // a CUDA graph); it stays ordered with cudaMemcpy/cudaMemset on the legacy stream.
  static Exec ex = [] {
    Exec e(Device::CUDA, &cuda_backend());
    if (cuda_available()) e.set_stream(cuda_stream_create());
    return e;
  }();
  return ex;
}

}  // namespace hytra
