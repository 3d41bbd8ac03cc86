// CPU reference of the MoE dispatch ops (ops/cpu/moe_dispatch.cpp): gather_rows and
// scatter_add_rows against index loops, the docs/spec/names.md §7 interleave vector and interleaved == plain
// for every GLU kind, closed forms of the forward, the clamp-boundary gradient convention, and fp64
// central differences of moe_act_bwd (dh and dprobs) for every kind, away from clamp edges and kinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/random.h"
#include "core/error.h"
#include "ops/ops.h"

namespace hytra {
namespace {

using Kind = ops::ExpertActivation;

constexpr Kind kAllKinds[] = {Kind::SwiGLU, Kind::QuickGeGLU, Kind::GeLU, Kind::SquaredReLU};

bool is_glu(Kind k) { return k == Kind::SwiGLU || k == Kind::QuickGeGLU; }

Tensor make(const Shape& s, DType t, const std::vector<double>& v) {
  Tensor x = Tensor::empty(s, t);
  x.copy_from_f64(v);
  return x;
}

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

// Interleaves the columns of a plain GLU tensor (R, [gate F | linear F]) with block size I: the
// last dim viewed as [2, F/I, I] with its first two axes swapped (the inverse of docs/spec/names.md §7's
// un-interleaving).
std::vector<double> interleave(const std::vector<double>& plain, int64_t R, int64_t F, int64_t I) {
  std::vector<double> out(plain.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t b = 0; b < F / I; ++b)
        for (int64_t w = 0; w < I; ++w)
          out[size_t(r * 2 * F + (b * 2 + half) * I + w)] = plain[size_t(r * 2 * F + half * F + b * I + w)];
  return out;
}

TEST(MoeDispatch, GatherRowsMatchesIndexLoop) {
  Exec& ex = Exec::cpu();
  const int64_t N = 5, C = 7;
  const std::vector<int32_t> idx = {4, 0, 4, 2, 2, 4};  // repeats; rows 1 and 3 never picked
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    Tensor x = test::random_uniform({N, C}, dt, 11), y = Tensor::empty({int64_t(idx.size()), C}, dt);
    ops::gather_rows(ex, y, x, ints(idx));
    const std::vector<double> xv = x.to_f64_vector(), yv = y.to_f64_vector();
    for (size_t r = 0; r < idx.size(); ++r)
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(yv[r * C + size_t(c)], xv[size_t(idx[r] * C + c)]) << dtype_name(dt);
  }
  Tensor x = Tensor::zeros({N, C}, DType::F32), y = Tensor::empty({1, C}, DType::F32);
  EXPECT_THROW(ops::gather_rows(ex, y, x, ints({5})), Error);
  EXPECT_THROW(ops::gather_rows(ex, y, x, ints({-1})), Error);
}

TEST(MoeDispatch, ScatterAddRowsIsTheOrderedLoop) {
  Exec& ex = Exec::cpu();
  const int64_t R = 8, C = 5;
  // Segments: {0,1}, empty, {2,3,4}, {5}, empty; row 6 of `rows` and x's row 7 pad past the end.
  const std::vector<int32_t> off = {0, 2, 2, 5, 6, 6}, rows = {3, 0, 6, 1, 5, 2, 7, 4};
  const int64_t N = int64_t(off.size()) - 1;
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    Tensor x = test::random_uniform({R, C}, dt, 12, -1e3, 1e3), y = Tensor::empty({N, C}, dt);
    ops::scatter_add_rows(ex, y, x, ints(off), ints(rows));
    const std::vector<double> xv = x.to_f64_vector(), yv = y.to_f64_vector();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        float acc32 = 0.0f;  // the op's accumulator: fp32, or fp64 for fp64 data
        double acc64 = 0.0;
        for (int32_t j = off[size_t(n)]; j < off[size_t(n) + 1]; ++j) {
          acc32 += float(xv[size_t(rows[size_t(j)] * C + c)]);
          acc64 += xv[size_t(rows[size_t(j)] * C + c)];
        }
        const double want = dt == DType::F64   ? acc64
                            : dt == DType::F32 ? double(acc32)
                                               : double(bf16_to_float(float_to_bf16(acc32)));
        EXPECT_EQ(yv[size_t(n * C + c)], want) << dtype_name(dt) << " n=" << n << " c=" << c;
      }
  }
  Tensor x = Tensor::zeros({R, C}, DType::F32), y = Tensor::empty({2, C}, DType::F32);
  EXPECT_THROW(ops::scatter_add_rows(ex, y, x, ints({0, 3, 2}), ints(rows)), Error);  // decreasing
  EXPECT_THROW(ops::scatter_add_rows(ex, y, x, ints({0, 3, 9}), ints(rows)), Error);  // past R
  EXPECT_THROW(ops::scatter_add_rows(ex, y, x, ints({0, 1, 2}), ints({8, 0, 0, 0, 0, 0, 0, 0})), Error);
}

// docs/spec/names.md §7's vector: I = 2, F = 4, interleaved [1,2,5,6,3,4,7,8] is gate 1..4, linear 5..8; then
// random rows for more block sizes, forward and backward, bitwise.
TEST(MoeDispatch, InterleavedLayoutEqualsPlain) {
  Exec& ex = Exec::cpu();
  Tensor p = make({1}, DType::F32, {0.75});
  for (Kind k : {Kind::SwiGLU, Kind::QuickGeGLU})
    for (double clamp : {0.0, 3.0})
      for (double offset : {0.0, 1.0}) {
        Tensor inter = make({1, 8}, DType::F32, {1, 2, 5, 6, 3, 4, 7, 8});
        Tensor plain = make({1, 8}, DType::F32, {1, 2, 3, 4, 5, 6, 7, 8});
        Tensor yi = Tensor::empty({1, 4}, DType::F32), yp = Tensor::empty({1, 4}, DType::F32);
        ops::moe_act_fwd(ex, yi, inter, p, k, 2, offset, clamp);
        ops::moe_act_fwd(ex, yp, plain, p, k, 0, offset, clamp);
        EXPECT_EQ(yi.to_f64_vector(), yp.to_f64_vector());
      }

  const int64_t R = 3, F = 12;
  Tensor probs = test::random_uniform({R}, DType::F32, 13, 0.1, 1.0);
  Tensor dy = test::random_uniform({R, F}, DType::F32, 14);
  const std::vector<double> hv = test::random_uniform({R, 2 * F}, DType::F32, 15, -3.0, 3.0).to_f64_vector();
  Tensor h = make({R, 2 * F}, DType::F32, hv);
  for (Kind k : {Kind::SwiGLU, Kind::QuickGeGLU}) {
    Tensor yp = Tensor::empty({R, F}, DType::F32), dhp = Tensor::empty({R, 2 * F}, DType::F32);
    Tensor dpp = Tensor::empty({R}, DType::F32);
    ops::moe_act_fwd(ex, yp, h, probs, k, 0, 1.0, 0.5);
    ops::moe_act_bwd(ex, dhp, dpp, dy, h, probs, k, 0, 1.0, 0.5);
    for (int64_t I : {1, 2, 3, 4, 6, 12}) {
      Tensor hi = make({R, 2 * F}, DType::F32, interleave(hv, R, F, I));
      Tensor yi = Tensor::empty({R, F}, DType::F32), dhi = Tensor::empty({R, 2 * F}, DType::F32);
      Tensor dpi = Tensor::empty({R}, DType::F32);
      ops::moe_act_fwd(ex, yi, hi, probs, k, I, 1.0, 0.5);
      ops::moe_act_bwd(ex, dhi, dpi, dy, hi, probs, k, I, 1.0, 0.5);
      EXPECT_EQ(yi.to_f64_vector(), yp.to_f64_vector()) << "I=" << I;
      EXPECT_EQ(dhi.to_f64_vector(), interleave(dhp.to_f64_vector(), R, F, I)) << "I=" << I;
      EXPECT_EQ(dpi.to_f64_vector(), dpp.to_f64_vector()) << "I=" << I;
    }
  }
}

TEST(MoeDispatch, ForwardMatchesClosedForms) {
  Exec& ex = Exec::cpu();
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double p = 0.5;
  Tensor probs = make({1}, DType::F64, {p});
  // GLU: gate (1.5, 3), linear (-2, 0.25); clamp 2 turns gate 3 into 2 and linear -2 stays -2.
  Tensor hg = make({1, 4}, DType::F64, {1.5, 3.0, -2.0, 0.25});
  Tensor y = Tensor::empty({1, 2}, DType::F64);
  ops::moe_act_fwd(ex, y, hg, probs, Kind::SwiGLU, 0, 0.0, 2.0);
  EXPECT_NEAR(y.to_f64_vector()[0], 1.5 * sig(1.5) * -2.0 * p, 1e-14);
  EXPECT_NEAR(y.to_f64_vector()[1], 2.0 * sig(2.0) * 0.25 * p, 1e-14);
  ops::moe_act_fwd(ex, y, hg, probs, Kind::QuickGeGLU, 0, 1.0, 0.0);
  EXPECT_NEAR(y.to_f64_vector()[0], 1.5 * sig(1.702 * 1.5) * (-2.0 + 1.0) * p, 1e-14);
  EXPECT_NEAR(y.to_f64_vector()[1], 3.0 * sig(1.702 * 3.0) * (0.25 + 1.0) * p, 1e-14);
  Tensor x = make({1, 2}, DType::F64, {-0.7, 1.3});
  ops::moe_act_fwd(ex, y, x, probs, Kind::GeLU, 0, 0.0, 0.0);
  EXPECT_NEAR(y.to_f64_vector()[0], -0.7 * 0.5 * (1 + std::erf(-0.7 / std::sqrt(2.0))) * p, 1e-14);
  EXPECT_NEAR(y.to_f64_vector()[1], 1.3 * 0.5 * (1 + std::erf(1.3 / std::sqrt(2.0))) * p, 1e-14);
  ops::moe_act_fwd(ex, y, x, probs, Kind::SquaredReLU, 0, 0.0, 0.0);
  EXPECT_EQ(y.to_f64_vector()[0], 0.0);
  EXPECT_NEAR(y.to_f64_vector()[1], 1.3 * 1.3 * p, 1e-14);
}

// The documented convention: the clamp passes the gradient on the closed interval (torch.clamp),
// so gate == L and linear == +-L get the full gradient and only strictly clamped inputs get 0.
TEST(MoeDispatch, ClampGradientAtTheBoundary) {
  Exec& ex = Exec::cpu();
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double L = 1.0, p = 0.5, off = 0.0;
  const std::vector<double> gate = {1.0, 2.0, 0.5, 0.5, 0.5}, lin = {0.5, 0.5, 1.0, -1.0, 3.0};
  std::vector<double> hv = gate;
  hv.insert(hv.end(), lin.begin(), lin.end());
  Tensor h = make({1, 10}, DType::F64, hv), probs = make({1}, DType::F64, {p});
  Tensor dy = make({1, 5}, DType::F64, {1, 1, 1, 1, 1});
  Tensor dh = Tensor::empty({1, 10}, DType::F64), dp = Tensor::empty({1}, DType::F64);
  ops::moe_act_bwd(ex, dh, dp, dy, h, probs, Kind::SwiGLU, 0, off, L);
  const std::vector<double> d = dh.to_f64_vector();
  auto silu = [&](double g) { return g * sig(g); };
  auto dsilu = [&](double g) { return sig(g) * (1 + g * (1 - sig(g))); };
  EXPECT_NEAR(d[0], p * 0.5 * dsilu(1.0), 1e-14);  // gate == L: passes
  EXPECT_EQ(d[1], 0.0);                            // gate > L: clamped
  EXPECT_NEAR(d[6], p * silu(1.0), 1e-14);         // the linear of a clamped gate sees act(L)
  EXPECT_NEAR(d[7], p * silu(0.5), 1e-14);         // linear == L: passes
  EXPECT_NEAR(d[8], p * silu(0.5), 1e-14);         // linear == -L: passes
  EXPECT_EQ(d[9], 0.0);                            // linear > L: clamped
  EXPECT_NEAR(d[4], p * 1.0 * dsilu(0.5), 1e-14);  // its gate sees the clamped linear L
}

// fp64 central differences of L = sum(y * dy) against moe_act_bwd, for every kind, plain and
// interleaved, with and without clamp and offset. Inputs stay >= 0.05 away from 0 and +-L.
TEST(MoeDispatch, BackwardMatchesFiniteDifferences) {
  Exec& ex = Exec::cpu();
  const int64_t R = 3, F = 4;
  const double eps = 1e-6;
  const double clamp_offset[3][2] = {{0.0, 0.0}, {0.7, 0.0}, {0.7, 1.0}};
  uint64_t seed = 100;
  for (Kind k : kAllKinds)
    for (int64_t I : {0, 2}) {
      if (I > 0 && !is_glu(k)) continue;
      for (const auto& co : clamp_offset) {
        const double L = co[0], off = co[1];
        if (L > 0 && !is_glu(k)) continue;
        const int64_t Wh = is_glu(k) ? 2 * F : F;
        std::vector<double> hv = test::random_uniform({R, Wh}, DType::F64, ++seed, -1.5, 1.5).to_f64_vector();
        for (double& v : hv)
          for (double edge : {0.0, L, -L})
            if (std::abs(v - edge) < 0.05) v = edge + (v < edge ? -0.1 : 0.1);
        std::vector<double> pv = test::random_uniform({R}, DType::F64, ++seed, 0.2, 1.0).to_f64_vector();
        Tensor dy = test::random_uniform({R, F}, DType::F64, ++seed);
        const std::vector<double> dyv = dy.to_f64_vector();
        auto loss = [&](const std::vector<double>& h, const std::vector<double>& p) {
          Tensor y = Tensor::empty({R, F}, DType::F64);
          ops::moe_act_fwd(ex, y, make({R, Wh}, DType::F64, h), make({R}, DType::F64, p), k, I, off, L);
          double s = 0;
          const std::vector<double> yv = y.to_f64_vector();
          for (size_t i = 0; i < yv.size(); ++i) s += yv[i] * dyv[i];
          return s;
        };
        Tensor dh = Tensor::empty({R, Wh}, DType::F64), dp = Tensor::empty({R}, DType::F64);
        ops::moe_act_bwd(ex, dh, dp, dy, make({R, Wh}, DType::F64, hv), make({R}, DType::F64, pv), k, I, off, L);
        auto check = [&](std::vector<double>& v, size_t i, double analytic, const char* what) {
          const double keep = v[i];
          v[i] = keep + eps;
          const double up = loss(hv, pv);
          v[i] = keep - eps;
          const double down = loss(hv, pv);
          v[i] = keep;
          const double numeric = (up - down) / (2 * eps);
          EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(std::abs(analytic), std::abs(numeric)) + 1e-8)
              << what << "[" << i << "] kind=" << int(k) << " I=" << I << " L=" << L << " off=" << off;
        };
        const std::vector<double> dhv = dh.to_f64_vector(), dpv = dp.to_f64_vector();
        for (size_t i = 0; i < hv.size(); ++i) check(hv, i, dhv[i], "dh");
        for (size_t i = 0; i < pv.size(); ++i) check(pv, i, dpv[i], "dprobs");
      }
    }
}

}  // namespace
}  // namespace hytra
