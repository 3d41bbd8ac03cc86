// The parity harness's registry and input helpers (harness.h).
#include "parity/harness.h"

#include <sstream>

#include "common/random.h"

namespace hytra::parity {

Case make_case(std::string op, std::string shape, DType dtype, std::function<std::vector<Output>(uint64_t)> run) {
  const bool bf16 = dtype == DType::BF16;
  return Case{std::move(op), std::move(shape), dtype, bf16 ? Criterion::Norm : Criterion::Elementwise,
              bf16 ? 5e-3 : 1e-3, std::move(run)};
}

namespace {
std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}
}  // namespace

void register_case(Case c) { registry().push_back(std::move(c)); }
const std::vector<Case>& all_cases() { return registry(); }

Exec& gpu() { return Exec::cuda(); }
Exec& cpu() { return Exec::cpu(); }

Tensor rand(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  return test::random_uniform(shape, dtype, seed, lo, hi);
}

Tensor rand_ints(const Shape& shape, DType dtype, uint64_t seed, int lo, int hi) {
  std::vector<double> v = test::random_ids(shape, hi - lo + 1, seed).to_f64_vector();
  for (double& x : v) x += lo;
  Tensor t = Tensor::empty(shape, dtype);
  t.copy_from_f64(v);
  return t;
}

Tensor rand_ids(const Shape& shape, int64_t n, uint64_t seed) { return test::random_ids(shape, n, seed); }

Tensor dev(const Tensor& host) { return host.to(Device::CUDA); }

Tensor ref(const Tensor& t) {
  if (!is_floating(t.dtype())) return t.to(Device::CPU);
  return as_dtype(t, DType::F32);
}

Tensor as_dtype(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype);
  out.copy_from_f64(t.to_f64_vector());
  return out;
}

Tensor dev_empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, Device::CUDA); }
Tensor cpu_empty(const Shape& shape) { return Tensor::empty(shape, DType::F32); }

std::string dims(std::initializer_list<int64_t> d) {
  std::ostringstream os;
  bool first = true;
  for (int64_t x : d) {
    os << (first ? "" : "x") << x;
    first = false;
  }
  return os.str();
}

}  // namespace hytra::parity
