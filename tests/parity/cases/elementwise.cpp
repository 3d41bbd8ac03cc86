// Parity cases for fill, copy, add, axpy, scale: fp32, bf16 and mixed dtypes, odd sizes, and one
// size past the kernels' grid cap (the grid-stride loop covers the rest).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_fill(int64_t n, DType dt, double value) {
  register_case(make_case("fill", dims({n}) + " v=" + std::to_string(value), dt, [=](uint64_t) {
    Tensor yg = dev_empty({n}, dt), yc = is_floating(dt) ? cpu_empty({n}) : Tensor::empty({n}, dt);
    ops::fill(gpu(), yg, value);
    ops::fill(cpu(), yc, value);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

// exact: the device's rounding to y's dtype must equal the host's (round to nearest even).
void add_copy(int64_t n, DType xt, DType yt, bool exact) {
  std::string shape = dims({n}) + " " + dtype_name(xt) + "->" + dtype_name(yt);
  Case c = make_case("copy", shape, yt, [=](uint64_t seed) {
    Tensor x = xt == DType::I32 ? rand_ids({n}, 1000, seed) : rand(Shape{n}, xt, seed, -3.0, 3.0);
    Tensor yg = dev_empty({n}, yt), yc = cpu_empty({n});
    ops::copy(gpu(), yg, dev(x));
    ops::copy(cpu(), yc, ref(x));
    return std::vector<Output>{{"y", yg, exact ? as_dtype(yc, yt) : yc}};
  });
  if (exact) {
    c.criterion = Criterion::Exact;
    c.tol = 0;
  }
  register_case(c);
}

void add_add(int64_t n, DType yt, DType at, DType bt) {
  std::string shape = dims({n}) + " " + dtype_name(at) + "+" + dtype_name(bt);
  register_case(make_case("add", shape, yt, [=](uint64_t seed) {
    Tensor a = rand({n}, at, seed), b = rand({n}, bt, seed + 1);
    Tensor yg = dev_empty({n}, yt), yc = cpu_empty({n});
    ops::add(gpu(), yg, dev(a), dev(b));
    ops::add(cpu(), yc, ref(a), ref(b));
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

void add_axpy(int64_t n, DType yt, DType xt, double alpha) {
  std::string shape = dims({n}) + " x=" + dtype_name(xt);
  register_case(make_case("axpy", shape, yt, [=](uint64_t seed) {
    Tensor y = rand({n}, yt, seed), x = rand({n}, xt, seed + 1);
    Tensor yg = dev(y), yc = ref(y);
    ops::axpy(gpu(), yg, dev(x), alpha);
    ops::axpy(cpu(), yc, ref(x), alpha);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

void add_scale(int64_t n, DType dt, double alpha) {
  register_case(make_case("scale", dims({n}), dt, [=](uint64_t seed) {
    Tensor y = rand({n}, dt, seed);
    Tensor yg = dev(y), yc = ref(y);
    ops::scale(gpu(), yg, alpha);
    ops::scale(cpu(), yc, alpha);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(elementwise) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  add_fill(1000003, f32, -2.5);
  add_fill(4097, bf16, 0.375);
  add_fill(999, DType::I32, 7.0);
  add_copy(1000003, f32, f32, false);
  add_copy(100003, f32, bf16, true);
  add_copy(100003, bf16, f32, true);
  add_copy(4099, DType::I32, f32, true);
  add_add(1000003, f32, f32, f32);
  add_add(100003, bf16, bf16, bf16);
  add_add(100003, f32, bf16, f32);
  add_axpy(1000003, f32, f32, 0.7);
  add_axpy(100003, bf16, bf16, -1.5);
  add_axpy(100003, f32, bf16, 0.25);
  add_scale(20000003, f32, -1.25);
  add_scale(100003, bf16, 3.0);
}

}  // namespace hytra::parity
