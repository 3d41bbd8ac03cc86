// Parity cases for slice_copy and slice_scatter: every dim position, fp32 and bf16, 16-, 4- and
// 1-byte moves; both are pure data movement, so results must match exactly.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_slice(const Shape& big, int64_t dim, int64_t start, int64_t len, DType dt) {
  Shape part = big;
  part[size_t(dim)] = len;
  std::string shape = shape_str(big) + " dim=" + std::to_string(dim) + " [" + std::to_string(start) + "+" +
                      std::to_string(len) + "]";
  Case copy = make_case("slice_copy", shape, dt, [=](uint64_t seed) {
    Tensor x = rand(big, dt, seed);
    Tensor yg = dev_empty(part, dt), yc = Tensor::empty(part, dt);
    ops::slice_copy(gpu(), yg, dev(x), dim, start);
    ops::slice_copy(cpu(), yc, x, dim, start);
    return std::vector<Output>{{"y", yg, yc}};
  });
  Case scatter = make_case("slice_scatter", shape, dt, [=](uint64_t seed) {
    Tensor y = rand(big, dt, seed), x = rand(part, dt, seed + 1);
    Tensor yg = dev(y), yc = y.clone();
    ops::slice_scatter(gpu(), yg, dev(x), dim, start);
    ops::slice_scatter(cpu(), yc, x, dim, start);
    return std::vector<Output>{{"y", yg, yc}};
  });
  for (Case* c : {&copy, &scatter}) {
    c->criterion = Criterion::Exact;
    c->tol = 0;
    register_case(*c);
  }
}

}  // namespace

HYTRA_PARITY_CASES(slice) {
  add_slice({7, 5, 3}, 0, 2, 4, DType::F32);
  add_slice({7, 5, 3}, 1, 1, 3, DType::F32);
  add_slice({2, 3, 6, 8}, 2, 4, 1, DType::BF16);
  add_slice({4, 33, 12, 64}, 2, 10, 2, DType::BF16);
  add_slice({9, 130}, 1, 65, 65, DType::F32);
  add_slice({3, 7, 5}, 1, 1, 3, DType::BF16);       // 30-byte blocks at odd offsets: byte moves
  add_slice({64, 4, 128}, 1, 2, 1, DType::BF16);    // attention's k head of a grouped projection
}

}  // namespace hytra::parity
