// Parity cases for sum and sum_squares: fp32 and bf16, from one element to sizes past the
// kernels' partial-block cap. Inputs are in [0, 1) so the sums have no cancellation.
// count_zeros: inputs with about a third of their elements set to +0 or -0, counted exactly.
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

void add_count_zeros(int64_t n, DType dt) {
  Case c = make_case("count_zeros", dims({n}), dt, [=](uint64_t seed) {
    Tensor r = rand({n}, DType::F32, seed, 0.0, 1.0);
    std::vector<float> v = r.to_f32_vector();
    for (float& e : v) {
      if (e < 1.0f / 6)
        e = 0.0f;
      else if (e < 1.0f / 3)
        e = -0.0f;
    }
    Tensor zeroed = Tensor::empty({n}, DType::F32);
    zeroed.copy_from(v);
    const Tensor x = as_dtype(zeroed, dt);
    Tensor og = dev_empty({1}, DType::I64), oc = Tensor::empty({1}, DType::I64);
    ops::count_zeros(gpu(), og, dev(x));
    ops::count_zeros(cpu(), oc, ref(x));
    return std::vector<Output>{{"out", og, oc}};
  });
  c.criterion = Criterion::Exact;
  register_case(std::move(c));
}

}  // namespace

HYTRA_PARITY_CASES(reduce) {
  add_count_zeros(1, DType::F32);
  add_count_zeros(1000, DType::F32);
  add_count_zeros(3000017, DType::F32);
  add_count_zeros(2000003, DType::BF16);
  for (const char* op : {"sum", "sum_squares"}) {
    add_reduce(op, 1, DType::F32);
    add_reduce(op, 1000, DType::F32);
    add_reduce(op, 3000017, DType::F32);
    add_reduce(op, 4097, DType::BF16);
    add_reduce(op, 2000003, DType::BF16);
  }
}

}  // namespace hytra::parity
