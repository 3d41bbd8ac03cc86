// Finite-difference gradient checks (fp64, CPU): L = sum(f(x) * r) for a fixed random r; the
// analytic gradients from backward(dy = r) must match central differences
// (L(v + h) - L(v - h)) / 2h for every parameter of the store and for x (when floating), on every
// element of small tensors and a fixed sample of larger ones. Inputs should stay away from kinks.
#pragma once
#include <functional>
#include <string>

#include "common/tolerance.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/param.h"

namespace hytra::test {

using ForwardFn = std::function<Tensor(StepContext&, const Tensor&)>;
using BackwardFn = std::function<Tensor(StepContext&, const Tensor&)>;

struct GradcheckOptions {
  int64_t max_samples = 1000;     // elements checked per tensor (all when the tensor is smaller)
  double rel_tol = kGradcheckRelTol;  // |a - n| <= rel_tol * max(|a|, |n|) + abs_tol
  double abs_tol = 1e-8;          // rounding noise of the difference quotient: ~1e-16 * |L| / h
  double step = 1e-6;             // h
  uint64_t seed = 1;
  bool delay_wgrad = false;  // run backward with ctx.delay_wgrad, then drain the wgrad queue
};

// Checks every parameter of `store` (finalized in fp64 on the CPU) and x; records gtest failures
// naming the tensor, the element, the analytic and the numeric value.
void gradcheck(ParamStore& store, const Tensor& x, const ForwardFn& forward, const BackwardFn& backward,
               const GradcheckOptions& opt = {});

}  // namespace hytra::test
