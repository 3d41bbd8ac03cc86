// Element-wise comparison of two tensors (any devices/dtypes, compared as fp64 on the host):
// reports max abs error, max rel error, NMSE and the worst element; NaN/Inf always fail.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "common/tolerance.h"
#include "core/tensor.h"

namespace hytra::test {

struct CompareResult {
  double max_abs = 0, max_rel = 0, nmse = 0;
  int64_t worst = -1;       // index of the element furthest outside tolerance (or largest abs error)
  int64_t num_bad = 0;      // elements outside tolerance
  bool non_finite = false;  // a NaN/Inf in either tensor
  std::string summary() const;
};

CompareResult compare(const Tensor& got, const Tensor& want, Tolerance tol);

// gtest assertion: EXPECT_TRUE(all_close(got, want, tol)) prints the summary on failure.
::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, Tolerance tol);
// Bitwise equality of two tensors' bytes (same dtype and shape).
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace hytra::test
