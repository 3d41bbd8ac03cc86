// ops::conv1d_fwd/bwd on the CPU: the forward against the formula of ops.h evaluated index by
// index here, the backward against fp64 finite differences of <y, r> on every element of x, w and
// bias (dw and dbias start non-zero: they accumulate; dx starts as garbage: it is assigned). On
// CUDA: two runs of the forward and backward are bitwise equal (the weight gradients' fixed-order sums).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "core/device.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct ConvCase {
  int64_t B, T, C, K;
  bool silu;
};

// Widths 1 to 5, T < K, SiLU on and off.
const std::vector<ConvCase> kCases = {
    {2, 5, 3, 3, true},  {1, 2, 4, 4, true},  {2, 6, 5, 1, false},
    {1, 7, 2, 5, true},  {3, 4, 2, 2, false}, {1, 9, 6, 4, true},
};

// y (B,T,C) = act(bias[c] + sum_{j<K} w[c,j] x[b, t-(K-1)+j, c]), x = 0 before t = 0.
std::vector<double> conv_formula(const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1);
  const std::vector<double> xv = x.to_f64_vector(), wv = w.to_f64_vector(), bv = bias.to_f64_vector();
  std::vector<double> y(size_t(B * T * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double p = bv[size_t(c)];
        for (int64_t j = 0; j < K; ++j) {
          const int64_t s = t - (K - 1) + j;
          if (s >= 0) p += wv[size_t(c * K + j)] * xv[size_t((b * T + s) * C + c)];
        }
        y[size_t((b * T + t) * C + c)] = silu ? p / (1.0 + std::exp(-p)) : p;
      }
  return y;
}

TEST(Conv1d, ForwardMatchesFormula) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-13 : 1e-5;
    uint64_t seed = 10;
    for (const ConvCase& k : kCases) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " B=" << k.B << " T=" << k.T << " C=" << k.C
                                      << " K=" << k.K << " silu=" << k.silu);
      Tensor x = test::random_uniform({k.B, k.T, k.C}, dt, seed++, -2.0, 2.0);
      Tensor w = test::random_uniform({k.C, k.K}, dt, seed++);
      Tensor bias = test::random_uniform({k.C}, dt, seed++);
      Tensor y = Tensor::empty({k.B, k.T, k.C}, dt);
      ops::conv1d_fwd(Exec::cpu(), y, x, w, bias, k.silu);
      const std::vector<double> got = y.to_f64_vector(), want = conv_formula(x, w, bias, k.silu);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << i;
    }
  }
}

TEST(Conv1d, BackwardMatchesFiniteDifferences) {
  const DType f64 = DType::F64;
  uint64_t seed = 100;
  for (const ConvCase& k : kCases) {
    SCOPED_TRACE(testing::Message() << "B=" << k.B << " T=" << k.T << " C=" << k.C << " K=" << k.K
                                    << " silu=" << k.silu);
    Tensor x = test::random_uniform({k.B, k.T, k.C}, f64, seed++, -2.0, 2.0);
    Tensor w = test::random_uniform({k.C, k.K}, f64, seed++);
    Tensor bias = test::random_uniform({k.C}, f64, seed++);
    Tensor r = test::random_uniform({k.B, k.T, k.C}, f64, seed++);
    Tensor y = Tensor::empty({k.B, k.T, k.C}, f64);
    auto loss = [&] {
      ops::conv1d_fwd(Exec::cpu(), y, x, w, bias, k.silu);
      return test::weighted_sum(y, r);
    };
    Tensor dx = Tensor::empty({k.B, k.T, k.C}, f64);
    dx.copy_from_f64(std::vector<double>(size_t(dx.numel()), 1e30));
    Tensor dw0 = test::random_uniform({k.C, k.K}, f64, seed++), dw = dw0.clone();
    Tensor db0 = test::random_uniform({k.C}, f64, seed++), db = db0.clone();
    ops::conv1d_bwd(Exec::cpu(), dx, dw, db, r, x, w, bias, k.silu);
    std::vector<double> dwv = dw.to_f64_vector(), dbv = db.to_f64_vector();
    const std::vector<double> dw0v = dw0.to_f64_vector(), db0v = db0.to_f64_vector();
    for (size_t i = 0; i < dwv.size(); ++i) dwv[i] -= dw0v[i];
    for (size_t i = 0; i < dbv.size(); ++i) dbv[i] -= db0v[i];
    EXPECT_TRUE(test::grad_close(dx.to_f64_vector(), test::numeric_grad(x, loss))) << "dx";
    EXPECT_TRUE(test::grad_close(dwv, test::numeric_grad(w, loss))) << "dw";
    EXPECT_TRUE(test::grad_close(dbv, test::numeric_grad(bias, loss))) << "dbias";
  }
}

// The Mamba-2 mixer's calls: x, B and C ranges read in place from a wider in_proj output (bf16, K 4,
// SiLU), the input gradients written into their columns of a wide gradient; and an odd C (one channel
// per thread).
TEST(CudaConv1d, TwoRunsAreBitwiseEqual) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const DType bf = DType::BF16;
  const Device cuda = Device::CUDA;
  const int64_t B = 2, T = 1000, W = 1700, K = 4;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{256, 1024}, {1280, 256}, {1536, 128}, {1665, 33}};
  const Tensor in = test::random_uniform({B, T, W}, bf, 1, -2.0, 2.0).to(cuda);
  const Tensor w = test::random_uniform({W, K}, bf, 2).to(cuda), bias = test::random_uniform({W}, bf, 3).to(cuda);
  std::vector<Tensor> dys;
  for (auto [c0, width] : ranges) dys.push_back(test::random_uniform({B, T, width}, bf, 4 + uint64_t(c0)).to(cuda));
  auto run = [&] {
    Exec& ex = Exec::cuda();
    std::vector<Tensor> out = {Tensor::zeros({B, T, W}, bf, cuda), Tensor::zeros({W, K}, DType::F32, cuda),
                               Tensor::zeros({W}, DType::F32, cuda)};  // din (wide), dw, dbias
    for (size_t i = 0; i < ranges.size(); ++i) {
      const auto [c0, width] = ranges[i];
      const Tensor x = in.narrow(2, c0, width), wp = w.narrow(0, c0, width), bp = bias.narrow(0, c0, width);
      Tensor y = Tensor::empty({B, T, width}, bf, cuda), dx = out[0].narrow(2, c0, width);
      Tensor dwp = out[1].narrow(0, c0, width), dbp = out[2].narrow(0, c0, width);
      ops::conv1d_fwd(ex, y, x, wp, bp, true);
      ops::conv1d_bwd(ex, dx, dwp, dbp, dys[i], x, wp, bp, true);
      out.push_back(y);
    }
    return out;
  };
  const std::vector<Tensor> first = run(), second = run();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(test::bitwise_equal(first[i], second[i])) << i;
}

}  // namespace
}  // namespace hytra
