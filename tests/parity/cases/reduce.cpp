// Parity cases for sum and sum_squares: fp32 and bf16, from one element to sizes past the
// kernels' partial-block cap. Inputs are in [0, 1) so the sums have no cancellation.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_reduce(const char* op, int64_t n, DType dt) {
  const bool squares = std::string(op) == "sum_squares";
  register_case(make_case(op, dims({n}), dt, [=](uint64_t seed) {
    Tensor x = rand({n}, dt, seed, 0.0, 1.0);
    Tensor og = dev_empty({1}, DType::F32), oc = cpu_empty({1});
    if (squares) {
      ops::sum_squares(gpu(), og, dev(x));
      ops::sum_squares(cpu(), oc, ref(x));
    } else {
      ops::sum(gpu(), og, dev(x));
      ops::sum(cpu(), oc, ref(x));
    }
    return std::vector<Output>{{"out", og, oc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(reduce) {
  for (const char* op : {"sum", "sum_squares"}) {
    add_reduce(op, 1, DType::F32);
    add_reduce(op, 1000, DType::F32);
    add_reduce(op, 3000017, DType::F32);
    add_reduce(op, 4097, DType::BF16);
    add_reduce(op, 2000003, DType::BF16);
  }
}

}  // namespace hytra::parity
