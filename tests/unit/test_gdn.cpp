// The CPU gated delta rule (ops/cpu/gdn.cpp): the chunked forward against the plain sequential
// recurrence written out here in fp64 loops (ops.h formula), for several chunk sizes and lengths
// that are not multiples of them; the backward against fourth-order central differences of the op
// in fp64, on every element of every input and parameter; and `+=` into dA_log / ddt_bias.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/random.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct Shape6 {
  int64_t B, T, Hk, Hv, dk, dv;
};

struct Inputs {
  Tensor q, k;              // (B,T,Hk,dk)
  Tensor v;                 // (B,T,Hv,dv)
  Tensor alpha, beta_raw;   // (B,T,Hv)
  Tensor A_log, dt_bias;    // (Hv)
};

Inputs make_inputs(const Shape6& s, DType dt, uint64_t seed) {
  const DType pt = dt == DType::F64 ? DType::F64 : DType::F32;
  return Inputs{test::random_uniform({s.B, s.T, s.Hk, s.dk}, dt, seed),
                test::random_uniform({s.B, s.T, s.Hk, s.dk}, dt, seed + 1),
                test::random_uniform({s.B, s.T, s.Hv, s.dv}, dt, seed + 2),
                test::random_uniform({s.B, s.T, s.Hv}, dt, seed + 3, -1.5, 1.5),
                test::random_uniform({s.B, s.T, s.Hv}, dt, seed + 4, -2.0, 2.0),
                test::random_uniform({s.Hv}, pt, seed + 5, -1.0, 0.7),
                test::random_uniform({s.Hv}, pt, seed + 6, 0.0, 1.5)};
}

// o (B,T,Hv,dv) from the per-step recurrence, in fp64.
std::vector<double> sequential_fwd(const Shape6& s, const Inputs& in) {
  const std::vector<double> q = in.q.to_f64_vector(), k = in.k.to_f64_vector(), v = in.v.to_f64_vector();
  const std::vector<double> al = in.alpha.to_f64_vector(), br = in.beta_raw.to_f64_vector();
  const std::vector<double> A_log = in.A_log.to_f64_vector(), dtb = in.dt_bias.to_f64_vector();
  std::vector<double> o(size_t(s.B * s.T * s.Hv * s.dv));
  const double scale = 1.0 / std::sqrt(double(s.dk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hv; ++h) {
      const int64_t hk = h / (s.Hv / s.Hk);
      std::vector<double> S(size_t(s.dv * s.dk), 0.0), qn(size_t(s.dk)), kn(size_t(s.dk));
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t qo = ((b * s.T + t) * s.Hk + hk) * s.dk, vo = ((b * s.T + t) * s.Hv + h) * s.dv;
        const int64_t go = (b * s.T + t) * s.Hv + h;
        double sq = 0, sk = 0;
        for (int64_t j = 0; j < s.dk; ++j) {
          sq += q[size_t(qo + j)] * q[size_t(qo + j)];
          sk += k[size_t(qo + j)] * k[size_t(qo + j)];
        }
        for (int64_t j = 0; j < s.dk; ++j) {
          qn[size_t(j)] = q[size_t(qo + j)] / std::sqrt(sq + 1e-6);
          kn[size_t(j)] = k[size_t(qo + j)] / std::sqrt(sk + 1e-6);
        }
        const double x = al[size_t(go)] + dtb[size_t(h)];
        const double g = -std::exp(A_log[size_t(h)]) * std::log1p(std::exp(x));
        const double beta = 1.0 / (1.0 + std::exp(-br[size_t(go)]));
        // S <- exp(g) S (I - beta k k^T) + beta v k^T, row by row.
        for (int64_t r = 0; r < s.dv; ++r) {
          double* Sr = S.data() + r * s.dk;
          double sk_r = 0;
          for (int64_t j = 0; j < s.dk; ++j) sk_r += Sr[j] * kn[size_t(j)];
          for (int64_t j = 0; j < s.dk; ++j)
            Sr[j] = std::exp(g) * (Sr[j] - beta * sk_r * kn[size_t(j)]) + beta * v[size_t(vo + r)] * kn[size_t(j)];
          double orow = 0;
          for (int64_t j = 0; j < s.dk; ++j) orow += Sr[j] * qn[size_t(j)];
          o[size_t(vo + r)] = orow * scale;
        }
      }
    }
  return o;
}

Tensor run_fwd(const Shape6& s, const Inputs& in, int64_t chunk) {
  Tensor o = Tensor::empty({s.B, s.T, s.Hv, s.dv}, in.q.dtype());
  ops::gated_delta_rule_fwd(Exec::cpu(), o, in.q, in.k, in.v, in.alpha, in.beta_raw, in.A_log, in.dt_bias, chunk);
  return o;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(Gdn, ChunkedForwardEqualsSequentialRecurrence) {
  for (const Shape6 s : {Shape6{2, 37, 2, 4, 8, 6}, Shape6{1, 100, 1, 2, 16, 16}, Shape6{2, 5, 1, 1, 4, 3}}) {
    const Inputs in = make_inputs(s, DType::F64, 10 + uint64_t(s.T));
    const std::vector<double> want = sequential_fwd(s, in);
    for (int64_t chunk : {int64_t(1), int64_t(3), int64_t(16), int64_t(64), int64_t(1000)}) {
      const std::vector<double> got = run_fwd(s, in, chunk).to_f64_vector();
      EXPECT_LT(max_abs_diff(got, want), 1e-12) << "T=" << s.T << " chunk=" << chunk;
    }
  }
}

TEST(Gdn, Fp32ForwardCloseToFp64) {
  const Shape6 s{2, 70, 2, 4, 32, 24};
  const Inputs in = make_inputs(s, DType::F64, 3);
  Inputs in32{in.q, in.k, in.v, in.alpha, in.beta_raw, in.A_log, in.dt_bias};
  for (Tensor* t : {&in32.q, &in32.k, &in32.v, &in32.alpha, &in32.beta_raw, &in32.A_log, &in32.dt_bias}) {
    Tensor c = Tensor::empty(t->shape(), DType::F32);
    c.copy_from_f64(t->to_f64_vector());
    *t = c;
  }
  EXPECT_LT(max_abs_diff(run_fwd(s, in32, 64).to_f64_vector(), sequential_fwd(s, in)), 1e-5);
}

struct Grads {
  Tensor dq, dk, dv, dalpha, dbeta_raw, dA_log, ddt_bias;
};

Grads run_bwd(const Shape6& s, const Inputs& in, const Tensor& dout, int64_t chunk, const Tensor& dA0,
              const Tensor& ddt0) {
  const DType dt = in.q.dtype();
  Grads g{Tensor::empty(in.q.shape(), dt),     Tensor::empty(in.k.shape(), dt),
          Tensor::empty(in.v.shape(), dt),     Tensor::empty(in.alpha.shape(), dt),
          Tensor::empty(in.beta_raw.shape(), dt), dA0.clone(), ddt0.clone()};
  ops::gated_delta_rule_bwd(Exec::cpu(), g.dq, g.dk, g.dv, g.dalpha, g.dbeta_raw, g.dA_log, g.ddt_bias, dout, in.q,
                            in.k, in.v, in.alpha, in.beta_raw, in.A_log, in.dt_bias, chunk);
  return g;
}

TEST(Gdn, BackwardMatchesFiniteDifferences) {
  const Shape6 s{2, 7, 1, 2, 4, 3};
  const int64_t chunk = 3;
  Inputs in = make_inputs(s, DType::F64, 77);
  const Tensor r = test::random_uniform({s.B, s.T, s.Hv, s.dv}, DType::F64, 80);  // dL/do
  const std::vector<double> rv = r.to_f64_vector();
  auto loss = [&] {
    const std::vector<double> o = run_fwd(s, in, chunk).to_f64_vector();
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * rv[i];
    return l;
  };
  const Grads g = run_bwd(s, in, r, chunk, Tensor::zeros({s.Hv}, DType::F64), Tensor::zeros({s.Hv}, DType::F64));
  const struct {
    const char* name;
    Tensor* x;
    const Tensor* grad;
  } checks[] = {{"q", &in.q, &g.dq},           {"k", &in.k, &g.dk},
                {"v", &in.v, &g.dv},           {"alpha", &in.alpha, &g.dalpha},
                {"beta_raw", &in.beta_raw, &g.dbeta_raw}, {"A_log", &in.A_log, &g.dA_log},
                {"dt_bias", &in.dt_bias, &g.ddt_bias}};
  const double h = 1e-4;
  for (const auto& c : checks) {
    double* x = c.x->data<double>();
    const double* ga = c.grad->data<double>();
    for (int64_t i = 0; i < c.x->numel(); ++i) {
      const double x0 = x[i];
      auto at = [&](double dx) {
        x[i] = x0 + dx;
        return loss();
      };
      const double num = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
      x[i] = x0;
      EXPECT_NEAR(ga[i], num, 1e-6 * std::max(std::abs(ga[i]), std::abs(num)) + 1e-10)
          << c.name << "[" << i << "]";
    }
  }
}

TEST(Gdn, ParamGradsAccumulate) {
  const Shape6 s{2, 11, 2, 4, 8, 5};
  const Inputs in = make_inputs(s, DType::F64, 5);
  const Tensor dout = test::random_uniform({s.B, s.T, s.Hv, s.dv}, DType::F64, 6);
  const Tensor dA0 = test::random_uniform({s.Hv}, DType::F64, 7), ddt0 = test::random_uniform({s.Hv}, DType::F64, 8);
  const Grads from_zero =
      run_bwd(s, in, dout, 4, Tensor::zeros({s.Hv}, DType::F64), Tensor::zeros({s.Hv}, DType::F64));
  const Grads acc = run_bwd(s, in, dout, 4, dA0, ddt0);
  const std::vector<double> a0 = dA0.to_f64_vector(), d0 = ddt0.to_f64_vector();
  const std::vector<double> az = from_zero.dA_log.to_f64_vector(), dz = from_zero.ddt_bias.to_f64_vector();
  const std::vector<double> aa = acc.dA_log.to_f64_vector(), da = acc.ddt_bias.to_f64_vector();
  for (int64_t h = 0; h < s.Hv; ++h) {
    EXPECT_NE(az[size_t(h)], 0.0);
    EXPECT_NEAR(aa[size_t(h)], a0[size_t(h)] + az[size_t(h)], 1e-14);
    EXPECT_NEAR(da[size_t(h)], d0[size_t(h)] + dz[size_t(h)], 1e-14);
  }
  // The activation gradients are written, not accumulated: equal in both runs.
  EXPECT_EQ(max_abs_diff(acc.dq.to_f64_vector(), from_zero.dq.to_f64_vector()), 0.0);
  EXPECT_EQ(max_abs_diff(acc.dalpha.to_f64_vector(), from_zero.dalpha.to_f64_vector()), 0.0);
}

}  // namespace
}  // namespace hytra
