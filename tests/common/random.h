// Fresh random test inputs from Philox: pass a different seed per test case; the
// HYTRA_TEST_SEED environment variable shifts every seed (to run suites on new inputs).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hytra::test {

uint64_t test_seed(uint64_t base);
// Uniform in [lo, hi), any floating dtype, on `device`.
Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0,
                      Device device = Device::CPU);
// Integers in [0, n) as int32.
Tensor random_ids(const Shape& shape, int64_t n, uint64_t seed, Device device = Device::CPU);

}  // namespace hytra::test
