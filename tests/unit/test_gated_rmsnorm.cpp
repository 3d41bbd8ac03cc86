// ops::gated_rmsnorm_fwd/bwd on the CPU: the forward against the formulas of ops.h evaluated here
// (both gate placements, w of length C and of length group_size), the Mamba-2 form with one group
// against rmsnorm of x * silu(z), and the backward against fp64 finite differences of <y, r> on
// every element of x, z and w (dw starts non-zero: it accumulates). On CUDA: two runs of the
// forward and backward are bitwise equal (the weight gradient's fixed-order sums).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "core/device.h"
#include "ops/ops.h"

namespace hytra {
namespace {

constexpr double kEps = 1e-5;

struct NormCase {
  int64_t N, C, gs;
  bool w_full, norm_before_gate;
};

std::vector<NormCase> cases() {
  std::vector<NormCase> out;
  for (bool nbg : {false, true})
    for (bool w_full : {true, false}) {
      out.push_back({3, 12, 4, w_full, nbg});
      out.push_back({2, 10, 5, w_full, nbg});
      out.push_back({2, 6, 6, w_full, nbg});  // one group
    }
  return out;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// y (N,C) and rstd (N,G) by the formulas, group by group.
void norm_formula(const Tensor& x, const Tensor& z, const Tensor& w, int64_t gs, bool nbg, std::vector<double>& y,
                  std::vector<double>& rstd) {
  const int64_t N = x.size(0), C = x.size(1), G = C / gs, M = w.numel();
  const std::vector<double> xv = x.to_f64_vector(), zv = z.to_f64_vector(), wv = w.to_f64_vector();
  y.assign(size_t(N * C), 0.0);
  rstd.assign(size_t(N * G), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double ss = 0;
      for (int64_t c = g * gs; c < (g + 1) * gs; ++c) {
        const size_t i = size_t(n * C + c);
        const double v = nbg ? xv[i] : xv[i] * silu(zv[i]);
        ss += v * v;
      }
      const double r = 1.0 / std::sqrt(ss / double(gs) + kEps);
      rstd[size_t(n * G + g)] = r;
      for (int64_t c = g * gs; c < (g + 1) * gs; ++c) {
        const size_t i = size_t(n * C + c);
        y[i] = xv[i] * silu(zv[i]) * r * wv[size_t(c % M)];
      }
    }
}

std::string name(const NormCase& k) {
  return "N=" + std::to_string(k.N) + " C=" + std::to_string(k.C) + " gs=" + std::to_string(k.gs) +
         (k.w_full ? " w=C" : " w=gs") + (k.norm_before_gate ? " norm-gate" : " gate-norm");
}

TEST(GatedRmsnorm, ForwardMatchesFormula) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-13 : 1e-5;
    const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
    uint64_t seed = 10;
    for (const NormCase& k : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + name(k));
      const int64_t G = k.C / k.gs;
      Tensor x = test::random_uniform({k.N, k.C}, dt, seed++, -2.0, 2.0);
      Tensor z = test::random_uniform({k.N, k.C}, dt, seed++, -3.0, 3.0);
      Tensor w = test::random_uniform({k.w_full ? k.C : k.gs}, dt, seed++, 0.5, 1.5);
      Tensor y = Tensor::empty({k.N, k.C}, dt), rstd = Tensor::empty({k.N, G}, st);
      ops::gated_rmsnorm_fwd(Exec::cpu(), y, rstd, x, z, w, k.gs, kEps, k.norm_before_gate);
      std::vector<double> want_y, want_r;
      norm_formula(x, z, w, k.gs, k.norm_before_gate, want_y, want_r);
      const std::vector<double> got_y = y.to_f64_vector(), got_r = rstd.to_f64_vector();
      for (size_t i = 0; i < want_y.size(); ++i)
        EXPECT_NEAR(got_y[i], want_y[i], tol * (1 + std::fabs(want_y[i]))) << i;
      for (size_t i = 0; i < want_r.size(); ++i) EXPECT_NEAR(got_r[i], want_r[i], tol * want_r[i]) << "rstd " << i;
    }
  }
}

// norm_before_gate = false with one group is rmsnorm(u = x * silu(z)): same y, rstd and dw, and
// dx = (rmsnorm's input gradient) * silu(z).
TEST(GatedRmsnorm, OneGroupGateFirstIsRmsnormOfGatedInput) {
  const DType f64 = DType::F64;
  const int64_t N = 5, C = 16;
  Tensor x = test::random_uniform({N, C}, f64, 1, -2.0, 2.0), z = test::random_uniform({N, C}, f64, 2, -3.0, 3.0);
  Tensor w = test::random_uniform({C}, f64, 3, 0.5, 1.5), dy = test::random_uniform({N, C}, f64, 4);
  const std::vector<double> xv = x.to_f64_vector(), zv = z.to_f64_vector();
  std::vector<double> uv(xv.size()), sz(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    sz[i] = silu(zv[i]);
    uv[i] = xv[i] * sz[i];
  }
  Tensor u = Tensor::empty({N, C}, f64);
  u.copy_from_f64(uv);

  Tensor y = Tensor::empty({N, C}, f64), rstd = Tensor::empty({N, 1}, f64);
  Tensor y_ref = Tensor::empty({N, C}, f64), rstd_ref = Tensor::empty({N}, f64);
  ops::gated_rmsnorm_fwd(Exec::cpu(), y, rstd, x, z, w, C, kEps, false);
  ops::rmsnorm_fwd(Exec::cpu(), y_ref, rstd_ref, u, w, kEps);
  EXPECT_TRUE(test::all_close(y, y_ref, test::tol_for(f64)));
  EXPECT_TRUE(test::all_close(rstd.view({N}), rstd_ref, test::tol_for(f64)));

  Tensor dx = Tensor::empty({N, C}, f64), dz = Tensor::empty({N, C}, f64), dw = Tensor::zeros({C}, f64);
  Tensor du = Tensor::empty({N, C}, f64), dw_ref = Tensor::zeros({C}, f64);
  ops::gated_rmsnorm_bwd(Exec::cpu(), dx, dz, dw, dy, x, z, w, rstd, C, false);
  ops::rmsnorm_bwd(Exec::cpu(), du, dw_ref, dy, u, w, rstd_ref);
  std::vector<double> dx_ref = du.to_f64_vector();
  for (size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] *= sz[i];
  Tensor dx_want = Tensor::empty({N, C}, f64);
  dx_want.copy_from_f64(dx_ref);
  EXPECT_TRUE(test::all_close(dx, dx_want, test::tol_for(f64)));
  EXPECT_TRUE(test::all_close(dw, dw_ref, test::tol_for(f64)));
}

TEST(GatedRmsnorm, BackwardMatchesFiniteDifferences) {
  const DType f64 = DType::F64;
  uint64_t seed = 100;
  for (const NormCase& k : cases()) {
    SCOPED_TRACE(name(k));
    const int64_t G = k.C / k.gs, M = k.w_full ? k.C : k.gs;
    Tensor x = test::random_uniform({k.N, k.C}, f64, seed++, -2.0, 2.0);
    Tensor z = test::random_uniform({k.N, k.C}, f64, seed++, -3.0, 3.0);
    Tensor w = test::random_uniform({M}, f64, seed++, 0.5, 1.5);
    Tensor r = test::random_uniform({k.N, k.C}, f64, seed++);
    Tensor y = Tensor::empty({k.N, k.C}, f64), rstd = Tensor::empty({k.N, G}, f64);
    auto loss = [&] {
      ops::gated_rmsnorm_fwd(Exec::cpu(), y, rstd, x, z, w, k.gs, kEps, k.norm_before_gate);
      return test::weighted_sum(y, r);
    };
    loss();  // rstd for the backward
    Tensor dx = Tensor::empty({k.N, k.C}, f64), dz = Tensor::empty({k.N, k.C}, f64);
    dx.copy_from_f64(std::vector<double>(size_t(dx.numel()), 1e30));
    dz.copy_from_f64(std::vector<double>(size_t(dz.numel()), 1e30));
    Tensor dw0 = test::random_uniform({M}, f64, seed++), dw = dw0.clone();
    ops::gated_rmsnorm_bwd(Exec::cpu(), dx, dz, dw, r, x, z, w, rstd, k.gs, k.norm_before_gate);
    std::vector<double> dwv = dw.to_f64_vector();
    const std::vector<double> dw0v = dw0.to_f64_vector();
    for (size_t i = 0; i < dwv.size(); ++i) dwv[i] -= dw0v[i];
    EXPECT_TRUE(test::grad_close(dx.to_f64_vector(), test::numeric_grad(x, loss))) << "dx";
    EXPECT_TRUE(test::grad_close(dz.to_f64_vector(), test::numeric_grad(z, loss))) << "dz";
    EXPECT_TRUE(test::grad_close(dwv, test::numeric_grad(w, loss))) << "dw";
  }
}

// The Mamba-2 mixer's norm (z read in place from a wider tensor, w (C), 8 groups of 512: the register
// path) and the gated delta net's (w (group_size), gate before the norm); a group of 2048 takes the
// loop kernels.
TEST(CudaGatedRmsnorm, TwoRunsAreBitwiseEqual) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t N, C, gs, pad;
    bool w_full, nbg;
  };
  for (const Case& k : {Case{1000, 4096, 512, 64, true, false}, Case{700, 4096, 128, 0, false, true},
                        Case{300, 2048, 2048, 8, true, false}}) {
    SCOPED_TRACE(testing::Message() << "N=" << k.N << " C=" << k.C << " gs=" << k.gs);
    const DType bf = DType::BF16;
    const Device cuda = Device::CUDA;
    const Tensor x = test::random_uniform({k.N, k.C}, bf, 1, -2.0, 2.0).to(cuda);
    const Tensor zw = test::random_uniform({k.N, k.C + k.pad}, bf, 2, -3.0, 3.0).to(cuda), z = zw.narrow(1, 0, k.C);
    const Tensor w = test::random_uniform({k.w_full ? k.C : k.gs}, bf, 3, 0.5, 1.5).to(cuda);
    const Tensor dy = test::random_uniform({k.N, k.C}, bf, 4).to(cuda);
    auto run = [&] {
      Exec& ex = Exec::cuda();
      std::vector<Tensor> out = {Tensor::empty({k.N, k.C}, bf, cuda),
                                 Tensor::empty({k.N, k.C / k.gs}, DType::F32, cuda),
                                 Tensor::empty({k.N, k.C}, bf, cuda), Tensor::zeros({k.N, k.C + k.pad}, bf, cuda),
                                 Tensor::zeros(w.shape(), DType::F32, cuda)};  // y, rstd, dx, dz (wide), dw
      ops::gated_rmsnorm_fwd(ex, out[0], out[1], x, z, w, k.gs, kEps, k.nbg);
      Tensor dz = out[3].narrow(1, 0, k.C);
      ops::gated_rmsnorm_bwd(ex, out[2], dz, out[4], dy, x, z, w, out[1], k.gs, k.nbg);
      return out;
    };
    const std::vector<Tensor> first = run(), second = run();
    const char* names[] = {"y", "rstd", "dx", "dz", "dw"};
    for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(test::bitwise_equal(first[i], second[i])) << names[i];
  }
}

}  // namespace
}  // namespace hytra
