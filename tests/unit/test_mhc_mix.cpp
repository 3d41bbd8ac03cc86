// ops::mhc_aggregate_* and ops::mhc_combine_* on the CPU (docs/spec/mhc.md §2 steps 5-6): the §2 vector
// (streams [1,2],[3,4]), the forwards and backwards against naive loops in fp64 (fp64, fp32 and
// bf16 data), and both backwards against fp64 central differences of <out, r> on every input.
// aggregate_bwd's dX starts random (it accumulates); combine_bwd's outputs start at 1e30 (they are
// overwritten).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/finite_diff.h"
#include "common/random.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct Shape3 {
  int64_t N, n, C;
};

const std::vector<Shape3> kShapes = {{3, 1, 5}, {2, 2, 7}, {2, 3, 4}, {1, 4, 9}, {4, 2, 1}};

std::string name(const Shape3& s, DType dt) {
  return std::string(dtype_name(dt)) + " N=" + std::to_string(s.N) + " n=" + std::to_string(s.n) +
         " C=" + std::to_string(s.C);
}

Tensor filled(const Shape& shape, DType dt, double v) {
  Tensor t = Tensor::empty(shape, dt);
  t.copy_from_f64(std::vector<double>(size_t(t.numel()), v));
  return t;
}

Tensor from(const Shape& shape, DType dt, const std::vector<double>& v) {
  Tensor t = Tensor::empty(shape, dt);
  t.copy_from_f64(v);
  return t;
}

// Tolerance for a value of magnitude scale stored in dt.
double tol(DType dt, double scale) {
  const double rel = dt == DType::F64 ? 1e-13 : dt == DType::F32 ? 1e-6 : 1e-2;
  return rel * (1.0 + scale);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, DType dt, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], tol(dt, std::fabs(want[k]))) << what << " " << k;
}

TEST(MhcMix, SpecVector) {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const DType ct = dt == DType::F64 ? DType::F64 : DType::F32;
    Tensor X = from({1, 2, 2}, dt, {1, 2, 3, 4});
    Tensor h_pre = from({1, 2}, ct, {0.5, 0.5});
    Tensor u = Tensor::empty({1, 2}, dt);
    ops::mhc_aggregate_fwd(Exec::cpu(), u, X, h_pre);
    EXPECT_EQ(u.to_f64_vector(), (std::vector<double>{2, 3}));

    Tensor h_res = filled({1, 2, 2}, ct, 0.5), h_post = filled({1, 2}, ct, 1.0);
    Tensor Y = Tensor::empty({1, 2, 2}, dt);
    ops::mhc_combine_fwd(Exec::cpu(), Y, X, u, h_res, h_post);
    EXPECT_EQ(Y.to_f64_vector(), (std::vector<double>{4, 6, 4, 6}));
  }
}

TEST(MhcMix, ForwardsMatchLoops) {
  uint64_t seed = 1;
  for (DType dt : {DType::F64, DType::F32, DType::BF16})
    for (const Shape3& s : kShapes) {
      SCOPED_TRACE(name(s, dt));
      const DType ct = dt == DType::F64 ? DType::F64 : DType::F32;
      const auto [N, n, C] = s;
      Tensor X = test::random_uniform({N, n, C}, dt, seed++, -2.0, 2.0);
      Tensor F = test::random_uniform({N, C}, dt, seed++, -2.0, 2.0);
      Tensor h_pre = test::random_uniform({N, n}, ct, seed++, 0.0, 1.0);
      Tensor h_res = test::random_uniform({N, n, n}, ct, seed++, 0.0, 1.0);
      Tensor h_post = test::random_uniform({N, n}, ct, seed++, 0.0, 2.0);
      const std::vector<double> x = X.to_f64_vector(), f = F.to_f64_vector(), hp = h_pre.to_f64_vector();
      const std::vector<double> hr = h_res.to_f64_vector(), ho = h_post.to_f64_vector();

      std::vector<double> u_want(size_t(N * C), 0.0), y_want(size_t(N * n * C), 0.0);
      for (int64_t t = 0; t < N; ++t)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < n; ++i) {
            u_want[size_t(t * C + c)] += hp[size_t(t * n + i)] * x[size_t((t * n + i) * C + c)];
            double& y = y_want[size_t((t * n + i) * C + c)];
            for (int64_t j = 0; j < n; ++j) y += hr[size_t((t * n + i) * n + j)] * x[size_t((t * n + j) * C + c)];
            y += ho[size_t(t * n + i)] * f[size_t(t * C + c)];
          }

      Tensor u = Tensor::empty({N, C}, dt), Y = Tensor::empty({N, n, C}, dt);
      ops::mhc_aggregate_fwd(Exec::cpu(), u, X, h_pre);
      ops::mhc_combine_fwd(Exec::cpu(), Y, X, F, h_res, h_post);
      expect_near(u.to_f64_vector(), u_want, dt, "u");
      expect_near(Y.to_f64_vector(), y_want, dt, "Y");
    }
}

TEST(MhcMix, BackwardsMatchLoops) {
  uint64_t seed = 50;
  for (DType dt : {DType::F64, DType::F32, DType::BF16})
    for (const Shape3& s : kShapes) {
      SCOPED_TRACE(name(s, dt));
      const DType ct = dt == DType::F64 ? DType::F64 : DType::F32;
      const auto [N, n, C] = s;
      Tensor X = test::random_uniform({N, n, C}, dt, seed++, -2.0, 2.0);
      Tensor F = test::random_uniform({N, C}, dt, seed++, -2.0, 2.0);
      Tensor du = test::random_uniform({N, C}, dt, seed++);
      Tensor dY = test::random_uniform({N, n, C}, dt, seed++);
      Tensor dX0 = test::random_uniform({N, n, C}, dt, seed++);
      Tensor h_pre = test::random_uniform({N, n}, ct, seed++, 0.0, 1.0);
      Tensor h_res = test::random_uniform({N, n, n}, ct, seed++, 0.0, 1.0);
      Tensor h_post = test::random_uniform({N, n}, ct, seed++, 0.0, 2.0);
      const std::vector<double> x = X.to_f64_vector(), f = F.to_f64_vector(), g = du.to_f64_vector();
      const std::vector<double> gy = dY.to_f64_vector(), dx0 = dX0.to_f64_vector();
      const std::vector<double> hp = h_pre.to_f64_vector(), hr = h_res.to_f64_vector(), ho = h_post.to_f64_vector();

      std::vector<double> agg_dx = dx0, agg_dh(size_t(N * n), 0.0);
      std::vector<double> dx(size_t(N * n * C), 0.0), df(size_t(N * C), 0.0);
      std::vector<double> dhr(size_t(N * n * n), 0.0), dho(size_t(N * n), 0.0);
      for (int64_t t = 0; t < N; ++t)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < C; ++c) {
            const size_t xi = size_t((t * n + i) * C + c), fi = size_t(t * C + c);
            agg_dx[xi] += hp[size_t(t * n + i)] * g[fi];
            agg_dh[size_t(t * n + i)] += x[xi] * g[fi];
            df[fi] += ho[size_t(t * n + i)] * gy[xi];
            dho[size_t(t * n + i)] += gy[xi] * f[fi];
            for (int64_t j = 0; j < n; ++j) {
              const size_t xj = size_t((t * n + j) * C + c);
              dx[xj] += hr[size_t((t * n + i) * n + j)] * gy[xi];
              dhr[size_t((t * n + i) * n + j)] += gy[xi] * x[xj];
            }
          }

      Tensor dXa = dX0.clone(), dh_pre = filled({N, n}, ct, 1e30);
      ops::mhc_aggregate_bwd(Exec::cpu(), dXa, dh_pre, du, X, h_pre);
      expect_near(dXa.to_f64_vector(), agg_dx, dt, "aggregate dX");
      expect_near(dh_pre.to_f64_vector(), agg_dh, dt, "dh_pre");

      Tensor dXc = filled({N, n, C}, dt, 1e30), dF = filled({N, C}, dt, 1e30);
      Tensor dh_res = filled({N, n, n}, ct, 1e30), dh_post = filled({N, n}, ct, 1e30);
      ops::mhc_combine_bwd(Exec::cpu(), dXc, dF, dh_res, dh_post, dY, X, F, h_res, h_post);
      expect_near(dXc.to_f64_vector(), dx, dt, "combine dX");
      expect_near(dF.to_f64_vector(), df, dt, "dF");
      expect_near(dh_res.to_f64_vector(), dhr, dt, "dh_res");
      expect_near(dh_post.to_f64_vector(), dho, dt, "dh_post");
    }
}

TEST(MhcMix, AggregateBackwardMatchesFiniteDifferences) {
  const DType f64 = DType::F64;
  uint64_t seed = 200;
  for (const Shape3& s : kShapes) {
    SCOPED_TRACE(name(s, f64));
    const auto [N, n, C] = s;
    Tensor X = test::random_uniform({N, n, C}, f64, seed++, -2.0, 2.0);
    Tensor h_pre = test::random_uniform({N, n}, f64, seed++, 0.0, 1.0);
    Tensor r = test::random_uniform({N, C}, f64, seed++);
    Tensor u = Tensor::empty({N, C}, f64);
    auto loss = [&] {
      ops::mhc_aggregate_fwd(Exec::cpu(), u, X, h_pre);
      return test::weighted_sum(u, r);
    };
    Tensor dX0 = test::random_uniform({N, n, C}, f64, seed++), dX = dX0.clone();
    Tensor dh_pre = filled({N, n}, f64, 1e30);
    ops::mhc_aggregate_bwd(Exec::cpu(), dX, dh_pre, r, X, h_pre);
    std::vector<double> dxv = dX.to_f64_vector();
    const std::vector<double> dx0v = dX0.to_f64_vector();
    for (size_t k = 0; k < dxv.size(); ++k) dxv[k] -= dx0v[k];
    EXPECT_TRUE(test::grad_close(dxv, test::numeric_grad(X, loss))) << "dX";
    EXPECT_TRUE(test::grad_close(dh_pre.to_f64_vector(), test::numeric_grad(h_pre, loss))) << "dh_pre";
  }
}

TEST(MhcMix, CombineBackwardMatchesFiniteDifferences) {
  const DType f64 = DType::F64;
  uint64_t seed = 300;
  for (const Shape3& s : kShapes) {
    SCOPED_TRACE(name(s, f64));
    const auto [N, n, C] = s;
    Tensor X = test::random_uniform({N, n, C}, f64, seed++, -2.0, 2.0);
    Tensor F = test::random_uniform({N, C}, f64, seed++, -2.0, 2.0);
    Tensor h_res = test::random_uniform({N, n, n}, f64, seed++, 0.0, 1.0);
    Tensor h_post = test::random_uniform({N, n}, f64, seed++, 0.0, 2.0);
    Tensor r = test::random_uniform({N, n, C}, f64, seed++);
    Tensor Y = Tensor::empty({N, n, C}, f64);
    auto loss = [&] {
      ops::mhc_combine_fwd(Exec::cpu(), Y, X, F, h_res, h_post);
      return test::weighted_sum(Y, r);
    };
    Tensor dX = filled({N, n, C}, f64, 1e30), dF = filled({N, C}, f64, 1e30);
    Tensor dh_res = filled({N, n, n}, f64, 1e30), dh_post = filled({N, n}, f64, 1e30);
    ops::mhc_combine_bwd(Exec::cpu(), dX, dF, dh_res, dh_post, r, X, F, h_res, h_post);
    EXPECT_TRUE(test::grad_close(dX.to_f64_vector(), test::numeric_grad(X, loss))) << "dX";
    EXPECT_TRUE(test::grad_close(dF.to_f64_vector(), test::numeric_grad(F, loss))) << "dF";
    EXPECT_TRUE(test::grad_close(dh_res.to_f64_vector(), test::numeric_grad(h_res, loss))) << "dh_res";
    EXPECT_TRUE(test::grad_close(dh_post.to_f64_vector(), test::numeric_grad(h_post, loss))) << "dh_post";
  }
}

}  // namespace
}  // namespace hytra
