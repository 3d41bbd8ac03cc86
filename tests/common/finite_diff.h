// Finite-difference checks of single ops (fp64, CPU): perturb one input element at a time and
// compare the change of a scalar loss with the op's analytic gradient. Used by the unit tests of
// ops whose backward is written by hand; layer-level checks live in gradcheck.h.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "common/tolerance.h"
#include "core/tensor.h"

namespace hytra::test {

// sum_i y[i] * r[i] (any floating dtypes, computed in fp64): the usual loss L = <f(x), r>.
double weighted_sum(const Tensor& y, const Tensor& r);

// dL/dt for every element of the CPU fp64 tensor t, by the fourth-order central difference
// (8 (L(v+h) - L(v-h)) - (L(v+2h) - L(v-2h))) / 12h with h = 1e-4 (gradcheck.h says why); loss()
// reruns the op on the current contents of t. t is restored element by element.
std::vector<double> numeric_grad(const Tensor& t, const std::function<double()>& loss, double h = 1e-4);

// Every element: |a - n| <= rel_tol * max(|a|, |n|) + abs_tol, and finite; a failure reports how
// many elements are off and the worst one.
::testing::AssertionResult grad_close(const std::vector<double>& analytic, const std::vector<double>& numeric,
                                      double rel_tol = kGradcheckRelTol, double abs_tol = 1e-9);

}  // namespace hytra::test
