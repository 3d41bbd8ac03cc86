// The mHC ops on the CPU (ops.h "mHC", docs/spec/mhc.md §2-§3): the Sinkhorn vectors of §3 for both
// variants, doubly-stochastic outputs for random logits, n = 1, §2's coefficient vector, and
// sinkhorn_bwd, and mhc_coeffs_bwd with mhc_streams_bwd, against fp64 finite differences of every input (dx, dw,
// dalpha and dbias start non-zero: they accumulate).
// Row sums for random logits (uniform in [-2, 2]): both variants end on a column normalisation, so
// columns sum to 1 (up to the 1e-6 of dev's denominators) while rows are only as close as the
// iterations converge. At T = 20 rows were measured off by up to 2e-3 (n = 2 and 4 converge
// slowest; n = 8 within 1e-6), hence kRowTol; at T = 500 rows also sum to 1 within 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/finite_diff.h"
#include "common/random.h"
#include "ops/ops.h"

namespace hytra {
namespace {

using ops::MhcVariant;

constexpr double kRowTol = 1e-2;
constexpr int64_t kIterations = 20, kConvergedIterations = 500;

const char* name(MhcVariant v) { return v == MhcVariant::Main ? "main" : "dev"; }

Tensor from(const Shape& shape, DType dt, const std::vector<double>& v) {
  Tensor t = Tensor::empty(shape, dt);
  t.copy_from_f64(v);
  return t;
}

std::vector<double> sinkhorn(const Tensor& logits, int64_t T, MhcVariant v) {
  Tensor m = Tensor::empty(logits.shape(), logits.dtype());
  ops::sinkhorn_fwd(Exec::cpu(), m, logits, T, v);
  return m.to_f64_vector();
}

// The largest |row sum - 1| and |column sum - 1| over R matrices n x n.
std::pair<double, double> sum_errors(const std::vector<double>& m, int64_t R, int64_t n) {
  double row_err = 0, col_err = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double rs = 0, cs = 0;
      for (int64_t k = 0; k < n; ++k) {
        rs += m[size_t(r * n * n + i * n + k)];
        cs += m[size_t(r * n * n + k * n + i)];
      }
      row_err = std::max(row_err, std::fabs(rs - 1));
      col_err = std::max(col_err, std::fabs(cs - 1));
    }
  return {row_err, col_err};
}

TEST(MhcOps, SinkhornSpecVectors) {
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (DType dt : {DType::F32, DType::F64}) {
      SCOPED_TRACE(std::string(name(v)) + " " + dtype_name(dt));
      const Tensor l = from({1, 2, 2}, dt, {0.0, std::log(2.0), 0.0, 0.0});
      const std::vector<double> t1 = sinkhorn(l, 1, v), t20 = sinkhorn(l, 20, v);
      const std::vector<double> want1{0.4, 4.0 / 7.0, 0.6, 3.0 / 7.0};
      const double a = std::sqrt(2.0) - 1.0, b = 2.0 - std::sqrt(2.0);
      const std::vector<double> want20{a, b, b, a};
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_NEAR(t1[i], want1[i], 1e-5) << "T=1 " << i;
        EXPECT_NEAR(t20[i], want20[i], 1e-5) << "T=20 " << i;
      }
      for (int64_t n : {1, 2, 3, 8})
        for (int64_t T : {1, 7}) {
          const std::vector<double> z = sinkhorn(Tensor::zeros({2, n, n}, dt), T, v);
          for (double e : z) EXPECT_NEAR(e, 1.0 / double(n), 1e-6) << "zeros n=" << n << " T=" << T;
        }
    }
}

TEST(MhcOps, SinkhornIsDoublyStochastic) {
  uint64_t seed = 1;
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (DType dt : {DType::F32, DType::F64})
      for (int64_t n : {2, 4, 8})
        for (int64_t T : {kIterations, kConvergedIterations}) {
          SCOPED_TRACE(std::string(name(v)) + " " + dtype_name(dt) + " n=" + std::to_string(n) + " T=" +
                       std::to_string(T));
          const int64_t R = 64;
          const auto [row_err, col_err] =
              sum_errors(sinkhorn(test::random_uniform({R, n, n}, dt, seed++, -2.0, 2.0), T, v), R, n);
          EXPECT_LE(col_err, 1e-5);
          EXPECT_LE(row_err, T == kIterations ? kRowTol : 1e-5);
        }
}

// At mHC's own scale (h_res = r * proj * alpha_res + bias: logits of order 0.5 or less) the default
// 20 iterations already give rows and columns summing to 1 within 1e-5, for both variants.
TEST(MhcOps, SinkhornAtMappingScaleIsDoublyStochasticIn20Iterations) {
  uint64_t seed = 100;
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (int64_t n : {2, 4, 8}) {
      SCOPED_TRACE(std::string(name(v)) + " n=" + std::to_string(n));
      const int64_t R = 256;
      const auto [row_err, col_err] =
          sum_errors(sinkhorn(test::random_uniform({R, n, n}, DType::F64, seed++, -0.5, 0.5), kIterations, v), R, n);
      EXPECT_LE(row_err, 1e-5);
      EXPECT_LE(col_err, 1e-5);
    }
}

TEST(MhcOps, SinkhornOfOneStreamIsOne) {
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor l = test::random_uniform({5, 1, 1}, dt, 7, -3.0, 3.0);
    for (int64_t T : {1, 20}) {
      for (double e : sinkhorn(l, T, MhcVariant::Main)) EXPECT_EQ(e, 1.0);
      // dev's +1e-6 in M0 and in every denominator leaves it 1 - O(1e-6).
      for (double e : sinkhorn(l, T, MhcVariant::Dev)) EXPECT_NEAR(e, 1.0, 1e-5);
    }
  }
}

// docs/spec/mhc.md §2: n = 2, C = 2, streams [1,2],[3,4], proj = 0 (W = 0), bias = 0, any alpha.
TEST(MhcOps, CoefficientsSpecVector) {
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (DType dt : {DType::F32, DType::F64}) {
      SCOPED_TRACE(std::string(name(v)) + " " + dtype_name(dt));
      const Tensor x = from({1, 4}, dt, {1, 2, 3, 4}), w = Tensor::zeros({8, 4}, dt);
      const Tensor alpha = from({3}, dt, {0.3, -0.7, 2.0}), bias = Tensor::zeros({8}, dt);
      Tensor proj = Tensor::empty({1, 8}, dt), rms = Tensor::empty({1}, dt);
      ops::mhc_proj_fwd(Exec::cpu(), proj, rms, x, w);
      EXPECT_NEAR(rms.to_f64_vector()[0], std::sqrt(30.0) / 2.0, 1e-6);
      Tensor pre = Tensor::empty({1, 2}, dt), post = Tensor::empty({1, 2}, dt);
      Tensor res = Tensor::empty({1, 2, 2}, dt), r = Tensor::empty({1}, dt);
      ops::mhc_coeffs_fwd(Exec::cpu(), pre, post, res, r, rms, proj, alpha.narrow(0, 0, 1), alpha.narrow(0, 1, 1),
                          alpha.narrow(0, 2, 1), bias, 20, v);
      EXPECT_NEAR(r.to_f64_vector()[0], 1.0 / (std::sqrt(30.0) / 2.0 + 1e-6), 1e-6);
      const double pre_want = v == MhcVariant::Dev ? 0.5 + 1e-6 : 0.5;
      for (double e : pre.to_f64_vector()) EXPECT_NEAR(e, pre_want, 1e-7);
      for (double e : post.to_f64_vector()) EXPECT_NEAR(e, 1.0, 1e-7);
      for (double e : res.to_f64_vector()) EXPECT_NEAR(e, 0.5, 1e-6);
    }
}

// weights (count) for the loss <output, w>.
Tensor weights(const Shape& shape, uint64_t seed) { return test::random_uniform(shape, DType::F64, seed); }

// got - start, elementwise (the part a += gradient added).
std::vector<double> added(const Tensor& got, const Tensor& start) {
  std::vector<double> g = got.to_f64_vector();
  const std::vector<double> s = start.to_f64_vector();
  for (size_t i = 0; i < g.size(); ++i) g[i] -= s[i];
  return g;
}

TEST(MhcOps, SinkhornBackwardMatchesFiniteDifferences) {
  const DType f64 = DType::F64;
  uint64_t seed = 100;
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (int64_t n : {1, 2, 3, 4})
      for (int64_t T : {1, 3, 20}) {
        SCOPED_TRACE(std::string(name(v)) + " n=" + std::to_string(n) + " T=" + std::to_string(T));
        const int64_t R = 3;
        Tensor l = test::random_uniform({R, n, n}, f64, seed++, -2.0, 2.0), w = weights({R, n, n}, seed++);
        Tensor m = Tensor::empty({R, n, n}, f64), dl = Tensor::empty({R, n, n}, f64);
        auto loss = [&] {
          ops::sinkhorn_fwd(Exec::cpu(), m, l, T, v);
          return test::weighted_sum(m, w);
        };
        ops::sinkhorn_bwd(Exec::cpu(), dl, w, l, T, v);
        EXPECT_TRUE(test::grad_close(dl.to_f64_vector(), test::numeric_grad(l, loss)));
      }
}

// The mapping end to end: proj and rms of the streams (mhc_proj_fwd), the coefficients (mhc_coeffs_fwd); the
// gradients of x and w come from mhc_coeffs_bwd then mhc_streams_bwd (its aggregation term off: du = 0).
TEST(MhcOps, CoefficientsBackwardMatchesFiniteDifferences) {
  const DType f64 = DType::F64;
  uint64_t seed = 200;
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (int64_t n : {1, 2, 3})
      for (int64_t T : {1, 4}) {
        SCOPED_TRACE(std::string(name(v)) + " n=" + std::to_string(n) + " T=" + std::to_string(T));
        const int64_t N = 3, C = 3, P = n * n + 2 * n;
        Tensor x = test::random_uniform({N, n * C}, f64, seed++, -1.0, 1.0);
        Tensor w = test::random_uniform({P, n * C}, f64, seed++, -0.5, 0.5);
        Tensor alpha = test::random_uniform({3}, f64, seed++, -1.0, 1.0);
        Tensor bias = test::random_uniform({P}, f64, seed++, -1.0, 1.0);
        Tensor wp = weights({N, n}, seed++), wq = weights({N, n}, seed++), wr = weights({N, n, n}, seed++);
        Tensor proj = Tensor::empty({N, P}, f64), rms = Tensor::empty({N}, f64);
        Tensor pre = Tensor::empty({N, n}, f64), post = Tensor::empty({N, n}, f64);
        Tensor res = Tensor::empty({N, n, n}, f64), r = Tensor::empty({N}, f64);
        auto loss = [&] {
          ops::mhc_proj_fwd(Exec::cpu(), proj, rms, x, w);
          ops::mhc_coeffs_fwd(Exec::cpu(), pre, post, res, r, rms, proj, alpha.narrow(0, 0, 1), alpha.narrow(0, 1, 1),
                              alpha.narrow(0, 2, 1), bias, T, v);
          return test::weighted_sum(pre, wp) + test::weighted_sum(post, wq) + test::weighted_sum(res, wr);
        };
        loss();  // proj, rms and r for the backward
        const Tensor dx0 = weights({N, n, C}, seed++), dw0 = weights({P, n * C}, seed++);
        const Tensor da0 = weights({3}, seed++), db0 = weights({P}, seed++);
        Tensor dx = dx0.clone(), dw = dw0.clone(), da = da0.clone(), db = db0.clone();
        Tensor dproj = Tensor::empty({N, P}, f64), dr = Tensor::empty({N}, f64);
        Tensor da_pre = da.narrow(0, 0, 1), da_post = da.narrow(0, 1, 1), da_res = da.narrow(0, 2, 1);
        ops::mhc_coeffs_bwd(Exec::cpu(), dproj, dr, da_pre, da_post, da_res, db, wp, wq, wr, proj, alpha.narrow(0, 0, 1),
                            alpha.narrow(0, 1, 1), alpha.narrow(0, 2, 1), bias, r, T, v);
        const Tensor du = Tensor::zeros({N, C}, f64), h_pre = weights({N, n}, seed++);
        ops::mhc_streams_bwd(Exec::cpu(), dx, dw, dproj, dr, r, rms, du, h_pre, x.view({N, n, C}), w);
        EXPECT_TRUE(test::grad_close(added(dx, dx0), test::numeric_grad(x, loss))) << "dx";
        EXPECT_TRUE(test::grad_close(added(dw, dw0), test::numeric_grad(w, loss))) << "dw";
        EXPECT_TRUE(test::grad_close(added(da, da0), test::numeric_grad(alpha, loss))) << "dalpha";
        EXPECT_TRUE(test::grad_close(added(db, db0), test::numeric_grad(bias, loss))) << "dbias";
      }
}

// mhc_streams_bwd's aggregation term: with dproj = 0 and dr = 0, dX gains exactly h_pre[t,i] du[t,:] (the gradient
// of u = sum_i h_pre[t,i] X[t,i,:]).
TEST(MhcOps, StreamsBackwardAddsTheAggregationGradient) {
  const DType f64 = DType::F64;
  const int64_t N = 4, n = 3, C = 5, P = n * n + 2 * n;
  Tensor X = test::random_uniform({N, n, C}, f64, 300, -1.0, 1.0), h_pre = weights({N, n}, 301);
  Tensor du = weights({N, C}, 302), w = weights({P, n * C}, 303);
  Tensor u = Tensor::empty({N, C}, f64);
  auto loss = [&] {
    ops::mhc_aggregate_fwd(Exec::cpu(), u, X, h_pre);
    return test::weighted_sum(u, du);
  };
  const Tensor dx0 = weights({N, n, C}, 304);
  Tensor dx = dx0.clone(), dw = Tensor::zeros({P, n * C}, f64);
  const Tensor zeros_p = Tensor::zeros({N, P}, f64), zeros_n = Tensor::zeros({N}, f64);
  const Tensor ones = from({N}, f64, std::vector<double>(size_t(N), 1.0));
  ops::mhc_streams_bwd(Exec::cpu(), dx, dw, zeros_p, zeros_n, ones, ones, du, h_pre, X, w);
  EXPECT_TRUE(test::grad_close(added(dx, dx0), test::numeric_grad(X, loss)));
  for (double e : dw.to_f64_vector()) EXPECT_EQ(e, 0.0);
}

}  // namespace
}  // namespace hytra
