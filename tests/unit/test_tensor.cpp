#include <gtest/gtest.h>

#include <cstdint>

#include "common/compare.h"
#include "common/random.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace hytra {
namespace {

TEST(Tensor, ShapeStridesAndViews) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::F32);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  t.data<float>()[13] = 5.0f;
  EXPECT_EQ(t.select(1).data<float>()[1], 5.0f);  // element [1, 0, 1]
  EXPECT_EQ(t.narrow(0, 1, 1).data<float>()[1], 5.0f);
  EXPECT_FALSE(t.narrow(2, 0, 2).is_contiguous());
  EXPECT_THROW(t.view({5, 5}), Error);
}

// Row-pitched layouts: a narrow of the last dim keeps evenly spaced rows; a narrow of a middle dim
// does not.
TEST(Tensor, RowPitch) {
  Tensor t = Tensor::zeros({2, 3, 10}, DType::F32);
  EXPECT_EQ(t.row_pitch(), 10);
  EXPECT_EQ(t.narrow(2, 4, 5).row_pitch(), 10);
  EXPECT_EQ(t.view({6, 10}).narrow(1, 0, 3).row_pitch(), 10);
  EXPECT_EQ(t.narrow(1, 0, 2).row_pitch(), -1);                  // rows 0,1 then 3,4 of the (6,10) grid
  EXPECT_EQ(t.narrow(1, 1, 1).narrow(2, 0, 4).row_pitch(), 30);  // one row per batch, 30 apart
  EXPECT_EQ(t.narrow(0, 1, 1).narrow(2, 2, 4).row_pitch(), 10);  // a size-1 dim carries no stride
  EXPECT_EQ(t.narrow(0, 0, 1).narrow(1, 2, 1).row_pitch(), 10);  // a single row: its width
  EXPECT_EQ(Tensor::zeros({7}, DType::F32).row_pitch(), 7);
}

// Sizes from flags or files: a count past int64 is an error, not a wrapped size.
TEST(Tensor, OverflowingShapesAreRefused) {
  EXPECT_EQ(checked_numel({2, 3, 4}), 24);
  EXPECT_EQ(checked_numel({}), 1);
  EXPECT_EQ(checked_numel({0, INT64_MAX}), 0);
  EXPECT_EQ(checked_numel({int64_t(1) << 32, int64_t(1) << 31}), -1);  // 2^63
  EXPECT_EQ(checked_numel({int64_t(1) << 31, int64_t(1) << 31}), int64_t(1) << 62);
  EXPECT_EQ(checked_numel({int64_t(1) << 31, int64_t(1) << 31}, 2), -1);  // 2^63 bytes
  EXPECT_EQ(checked_numel({3, -1}), -1);
  try {
    Tensor::empty({int64_t(1) << 40, int64_t(1) << 30}, DType::F32);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more bytes than a 64-bit size can count"), std::string::npos) << e.what();
  }
}

TEST(Tensor, DtypeRoundTrip) {
  Tensor t = Tensor::empty({3}, DType::BF16);
  t.copy_from({1.0f, -2.5f, 3.0078125f});
  auto v = t.to_f32_vector();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 3.0f);  // rounds to nearest even in bf16 (8 bits of mantissa)
  EXPECT_EQ(dtype_size(DType::I64), 8u);
}

TEST(Allocator, CpuStatsTrackInUseAndPeak) {
  Allocator& a = cpu_allocator();
  a.reset_peak();
  const MemoryStats before = a.stats();
  {
    Tensor t = Tensor::empty({1000}, DType::F32);
    EXPECT_EQ(a.stats().in_use, before.in_use + 4000);
    Tensor u = Tensor::empty({500}, DType::F64);
    EXPECT_EQ(a.stats().peak, before.in_use + 8000);
  }
  EXPECT_EQ(a.stats().in_use, before.in_use);
  EXPECT_EQ(a.stats().peak, before.in_use + 8000);
  if (!cuda_available()) {
    EXPECT_THROW(cuda_allocator(), Error);  // a clear error, not a crash
  }
}

TEST(Allocator, CudaCachingReusesBlocksAndTracksPeak) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Allocator& a = cuda_allocator();
  cuda_allocator_release_cached();  // blocks cached by earlier tests would serve the first allocation
  a.reset_peak();
  const MemoryStats s0 = a.stats();
  const size_t n = size_t(3) << 20;
  void* p = a.allocate(n);
  const MemoryStats s1 = a.stats();
  EXPECT_GE(s1.in_use - s0.in_use, int64_t(n));
  EXPECT_EQ(s1.peak, s1.in_use);
  a.deallocate(p, n);
  EXPECT_EQ(a.stats().in_use, s0.in_use);
  void* q = a.allocate(n);  // served from the cache: same block, nothing new reserved
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().reserved, s1.reserved);
  a.deallocate(q, n);
  EXPECT_EQ(a.stats().peak, s1.in_use);
  Tensor t = Tensor::zeros({1000}, DType::F32, Device::CUDA);  // tensors use it too
  EXPECT_EQ(t.to_f32_vector()[999], 0.0f);
}

TEST(Philox, KnownAnswerAndPurity) {
  // Philox4x32-10 known-answer test (Random123 kat_vectors): counter 0, key 0.
  Philox4 r = philox4x32(0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  // Same (seed, stream, offset) -> same value; different stream -> different value.
  EXPECT_EQ(philox_normal(5, 1, 17), philox_normal(5, 1, 17));
  EXPECT_NE(philox_normal(5, 1, 17), philox_normal(5, 2, 17));
  double mean = 0, var = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = philox_normal(42, 3, uint64_t(i));
    mean += x;
    var += x * x;
  }
  mean /= n;
  var = var / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(ThreadPool, CoversRangeOnce) {
  std::vector<int> hits(1000, 0);
  parallel_for(1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

TEST(Compare, DetectsNaNAndMismatch) {
  Tensor a = test::random_uniform({10}, DType::F32, 1);
  Tensor b = a.clone();
  EXPECT_TRUE(test::all_close(a, b, test::tol_for(DType::F32)));
  b.data<float>()[3] += 1.0f;
  EXPECT_FALSE(test::all_close(a, b, test::tol_for(DType::F32)));
  b.data<float>()[3] = std::nanf("");
  EXPECT_FALSE(test::all_close(a, b, test::tol_for(DType::F32)));
}

}  // namespace
}  // namespace hytra
