// Finite-difference gradient checks (fp64, CPU): L = sum(f(x) * r) for a fixed random r; the
// analytic gradients from backward(dy = r) must match the fourth-order central difference
//   (8 (L(v+h) - L(v-h)) - (L(v+2h) - L(v-2h))) / 12h
// for every parameter of the store and for x (when floating), on every element of small tensors
// and an evenly spread sample of larger ones. Why fourth order with h = 1e-4 rather than the
// two-point quotient with h = 1e-6: the quotient's rounding noise is ~1e-16 |L| / h, which at
// h = 1e-6 reaches 1e-8 in the attention cases and swamps gradients of ~1e-3 at a 1e-6 relative
// tolerance (seen with other HYTRA_TEST_SEEDs); at h = 1e-4 the noise is ~1e-11 and the truncation
// error O(h^4) ~1e-16. Inputs should stay away from kinks (|x| >> 2h).
#pragma once
#include <functional>
#include <string>

#include "common/tolerance.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/module.h"
#include "nn/param.h"

namespace hytra::test {

using ForwardFn = std::function<Tensor(StepContext&, const Tensor&)>;
using BackwardFn = std::function<Tensor(StepContext&, const Tensor&)>;

struct GradcheckOptions {
  int64_t max_samples = 1000;     // elements checked per tensor (all when the tensor is smaller)
  double rel_tol = kGradcheckRelTol;  // |a - n| <= rel_tol * max(|a|, |n|) + abs_tol
  double abs_tol = 1e-9;          // rounding noise of the difference quotient: ~1e-16 * |L| / h
  double step = 1e-4;             // h
  uint64_t seed = 1;
  bool delay_wgrad = false;  // run backward with ctx.delay_wgrad, then drain the wgrad queue
};

// Checks every parameter of `store` (finalized in fp64 on the CPU) and x; records gtest failures
// naming the tensor, the element, the analytic and the numeric value.
void gradcheck(ParamStore& store, const Tensor& x, const ForwardFn& forward, const BackwardFn& backward,
               const GradcheckOptions& opt = {});
// The same for a Module's forward/backward.
void gradcheck(ParamStore& store, const Tensor& x, Module& m, const GradcheckOptions& opt = {});

}  // namespace hytra::test
