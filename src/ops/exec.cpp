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
  static Exec ex(Device::CUDA, &cuda_backend());
  return ex;
}

}  // namespace hytra
