// int32 tensors to and from host vectors (routing plans, rolled token ids): the values cross the
// host once, whatever device the tensor lives on.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hytra {

inline Tensor int32_tensor(const std::vector<int32_t>& values, const Shape& shape, Device device) {
  Tensor t = Tensor::empty(shape, DType::I32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t.to(device);
}

inline std::vector<int32_t> int32_values(const Tensor& t) {
  const Tensor host = t.to(Device::CPU);
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

}  // namespace hytra
