#include <gtest/gtest.h>

#include "common/random.h"
#include "core/error.h"
#include "ops/ops.h"

namespace hytra {
namespace {

// Index helpers for a contiguous row-major 3-D tensor.
int64_t at3(const Shape& s, int64_t i, int64_t j, int64_t k) { return (i * s[1] + j) * s[2] + k; }

TEST(CpuSlice, CopyAndScatterMatchIndexLoops) {
  Exec& ex = Exec::cpu();
  const Shape big{4, 9, 5};
  for (int64_t dim = 0; dim < 3; ++dim) {
    const int64_t start = 1, len = big[size_t(dim)] - 2;
    Shape part = big;
    part[size_t(dim)] = len;
    Tensor x = test::random_uniform(big, DType::F32, 10 + uint64_t(dim));
    Tensor y = Tensor::empty(part, DType::F32);
    ops::slice_copy(ex, y, x, dim, start);
    Tensor z = test::random_uniform(big, DType::F32, 20 + uint64_t(dim));
    Tensor z0 = z.clone();
    ops::slice_scatter(ex, z, y, dim, start);
    for (int64_t i = 0; i < big[0]; ++i)
      for (int64_t j = 0; j < big[1]; ++j)
        for (int64_t k = 0; k < big[2]; ++k) {
          int64_t idx[3] = {i, j, k};
          const bool inside = idx[dim] >= start && idx[dim] < start + len;
          const float xv = x.data<float>()[at3(big, i, j, k)];
          if (inside) {
            idx[dim] -= start;
            EXPECT_EQ(y.data<float>()[at3(part, idx[0], idx[1], idx[2])], xv);
            EXPECT_EQ(z.data<float>()[at3(big, i, j, k)], xv);  // scatter wrote the copied slice back
          } else {
            EXPECT_EQ(z.data<float>()[at3(big, i, j, k)], z0.data<float>()[at3(big, i, j, k)]);
          }
        }
  }
}

TEST(CpuSlice, BadSliceIsANamedError) {
  Exec& ex = Exec::cpu();
  Tensor x = Tensor::zeros({4, 6}, DType::F32), y = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_THROW(ops::slice_copy(ex, y, x, 1, 4), Error);  // [4, 7) is outside dim 1
  Tensor w = Tensor::zeros({3, 3}, DType::F32);
  EXPECT_THROW(ops::slice_copy(ex, w, x, 1, 0), Error);  // dim 0 differs
}

}  // namespace
}  // namespace hytra
