// Parity case for random_normal: the CPU and the GPU evaluate the same Philox stream element by
// element (only the final transcendental functions may differ by an ulp).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_random_normal(int64_t n, DType dt, uint64_t stream) {
  Case c = make_case("random_normal", dims({n}) + " stream=" + std::to_string(stream), dt, [=](uint64_t seed) {
    Tensor yg = dev_empty({n}, dt), yc = Tensor::empty({n}, dt);
    ops::random_normal(gpu(), yg, seed, stream, 0.5, 0.02);
    ops::random_normal(cpu(), yc, seed, stream, 0.5, 0.02);
    return std::vector<Output>{{"y", yg, yc}};
  });
  c.criterion = Criterion::Elementwise;
  c.tol = 1e-6;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(random) {
  add_random_normal(100003, DType::F32, 7);
  add_random_normal(4097, DType::BF16, 123456789);
}

}  // namespace hytra::parity
