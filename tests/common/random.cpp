#include "common/random.h"

#include <cstdlib>
#include <vector>

#include "core/philox.h"

namespace hytra::test {

uint64_t test_seed(uint64_t base) {
  const char* env = std::getenv("HYTRA_TEST_SEED");
  return base + (env ? std::strtoull(env, nullptr, 10) * 1000003ull : 0);
}

Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  std::vector<double> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * philox_uniform01(test_seed(seed), 7, i);
  t.copy_from_f64(v);
  return t;
}

Tensor random_ids(const Shape& shape, int64_t n, uint64_t seed, Device device) {
  Tensor t = Tensor::empty(shape, DType::I32, device);
  std::vector<double> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    Philox4 r = philox4x32(test_seed(seed), 11, i);
    v[i] = double(r.v[0] % uint32_t(n));
  }
  t.copy_from_f64(v);
  return t;
}

}  // namespace hytra::test
