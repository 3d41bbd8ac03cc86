// ssd_chunk_scan_fwd / _bwd on the CPU: (a) the chunked forward equals the plain per-step recurrence
// written here (fp64 loops) for chunk sizes 1, 3, 16, 64 and longer than T, with T not a multiple
// of the chunk, in fp64 and fp32; (b) the backward equals fourth-order central differences of the
// fp64 op on every element of every input and parameter; (c) parameter gradients accumulate (+=).
// Inputs in Mamba's ranges: dt_raw in [-4, 0], dt_bias in [-1, 0.5] (dt from 0.007 to 1, so decays
// from none to strong), A_log = ln U(1, 16), D near 1. With a GPU, (d) two CUDA runs at a training-like
// shape (several heads per group, a partial last chunk, every kernel with many blocks) are bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "core/device.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct Inputs {
  Tensor x, dt_raw, Bm, Cm, dt_bias, A_log, D;  // (B,T,H,P), (B,T,H), (B,T,G,N) x2, (H) x3
};

// ln of U(1, 16), as Mamba initialises A_log.
Tensor a_log(int64_t H, DType dtype, uint64_t seed) {
  Tensor t = test::random_uniform({H}, dtype, seed, 1.0, 16.0);
  std::vector<double> v = t.to_f64_vector();
  for (double& a : v) a = std::log(a);
  t.copy_from_f64(v);
  return t;
}

Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t G, int64_t P, int64_t N, DType dt, uint64_t seed) {
  const DType pt = dt == DType::F64 ? DType::F64 : DType::F32;
  Inputs in{test::random_uniform({B, T, H, P}, dt, test::test_seed(seed)),
            test::random_uniform({B, T, H}, dt, test::test_seed(seed + 1), -4.0, 0.0),
            test::random_uniform({B, T, G, N}, dt, test::test_seed(seed + 2)),
            test::random_uniform({B, T, G, N}, dt, test::test_seed(seed + 3)),
            test::random_uniform({H}, pt, test::test_seed(seed + 4), -1.0, 0.5),
            a_log(H, pt, test::test_seed(seed + 5)),
            test::random_uniform({H}, pt, test::test_seed(seed + 6), 0.5, 1.5)};
  return in;
}

Tensor run_fwd(const Inputs& in, int64_t chunk) {
  Tensor y = Tensor::empty(in.x.shape(), in.x.dtype());
  ops::ssd_chunk_scan_fwd(Exec::cpu(), y, in.x, in.dt_raw, in.Bm, in.Cm, in.dt_bias, in.A_log, in.D, chunk, nullptr);
  return y;
}

// y of the per-step recurrence, in fp64, straight from the definition.
std::vector<double> recurrence(const Inputs& in) {
  const int64_t B = in.x.size(0), T = in.x.size(1), H = in.x.size(2), P = in.x.size(3);
  const int64_t G = in.Bm.size(2), N = in.Bm.size(3);
  const std::vector<double> x = in.x.to_f64_vector(), dr = in.dt_raw.to_f64_vector();
  const std::vector<double> Bv = in.Bm.to_f64_vector(), Cv = in.Cm.to_f64_vector();
  const std::vector<double> bias = in.dt_bias.to_f64_vector(), alog = in.A_log.to_f64_vector();
  const std::vector<double> D = in.D.to_f64_vector();
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      std::vector<double> S(P * N, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        const double dt = std::log1p(std::exp(dr[(b * T + t) * H + h] + bias[h]));
        const double decay = std::exp(-dt * std::exp(alog[h]));
        const double* xt = &x[((b * T + t) * H + h) * P];
        const double* bt = &Bv[((b * T + t) * G + g) * N];
        const double* ct = &Cv[((b * T + t) * G + g) * N];
        for (int64_t p = 0; p < P; ++p) {
          double acc = 0;
          for (int64_t n = 0; n < N; ++n) {
            S[p * N + n] = decay * S[p * N + n] + dt * xt[p] * bt[n];
            acc += S[p * N + n] * ct[n];
          }
          y[((b * T + t) * H + h) * P + p] = acc + D[h] * xt[p];
        }
      }
    }
  return y;
}

// max |a - b| / max(1, max |b|).
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, m = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    m = std::max(m, std::abs(b[i]));
  }
  return d / m;
}

TEST(CpuSsd, ChunkedForwardEqualsRecurrence) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-13 : 2e-6;
    for (int64_t T : {37, 64}) {
      Inputs in = make_inputs(2, T, 4, 2, 5, 6, dt, 100 + uint64_t(T));
      const std::vector<double> want = recurrence(in);
      for (int64_t chunk : {1, 3, 16, 64, 100})
        EXPECT_LT(max_rel_diff(run_fwd(in, chunk).to_f64_vector(), want), tol)
            << dtype_name(dt) << " T=" << T << " chunk=" << chunk;
    }
  }
  Inputs one_group = make_inputs(1, 23, 3, 1, 4, 8, DType::F64, 7);
  EXPECT_LT(max_rel_diff(run_fwd(one_group, 5).to_f64_vector(), recurrence(one_group)), 1e-13);
}

struct Grads {
  Tensor dx, ddt_raw, dB, dC, ddt_bias, dA_log, dD;
};

Grads run_bwd(const Inputs& in, const Tensor& dy, int64_t chunk, const Tensor& p0) {
  Grads g{Tensor::empty(in.x.shape(), DType::F64),
          Tensor::empty(in.dt_raw.shape(), DType::F64),
          Tensor::empty(in.Bm.shape(), DType::F64),
          Tensor::empty(in.Cm.shape(), DType::F64),
          p0.clone(),
          p0.clone(),
          p0.clone()};
  ops::ssd_chunk_scan_bwd(Exec::cpu(), g.dx, g.ddt_raw, g.dB, g.dC, g.ddt_bias, g.dA_log, g.dD, dy, in.x, in.dt_raw,
                          in.Bm, in.Cm, in.dt_bias, in.A_log, in.D, chunk, nullptr);
  return g;
}

TEST(CpuSsd, BackwardEqualsFiniteDifferences) {
  const int64_t chunk = 3;
  Inputs in = make_inputs(2, 7, 4, 2, 3, 5, DType::F64, 200);
  const Tensor r = test::random_uniform(in.x.shape(), DType::F64, test::test_seed(210));  // dL/dy
  const std::vector<double> rv = r.to_f64_vector();
  auto loss = [&] {
    const std::vector<double> y = run_fwd(in, chunk).to_f64_vector();
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * rv[i];
    return l;
  };
  const Grads g = run_bwd(in, r, chunk, Tensor::zeros({in.x.size(2)}, DType::F64));
  struct Check {
    const char* name;
    Tensor* input;
    const Tensor* grad;
  };
  const Check checks[] = {{"x", &in.x, &g.dx},   {"dt_raw", &in.dt_raw, &g.ddt_raw},    {"Bm", &in.Bm, &g.dB},
                          {"Cm", &in.Cm, &g.dC}, {"dt_bias", &in.dt_bias, &g.ddt_bias}, {"A_log", &in.A_log, &g.dA_log},
                          {"D", &in.D, &g.dD}};
  const double h = 1e-4;
  int64_t checked = 0;
  for (auto [name, input, grad] : checks) {
    double* v = input->data<double>();
    const double* an = grad->data<double>();
    for (int64_t i = 0; i < input->numel(); ++i) {
      const double v0 = v[i];
      auto at = [&](double step) {
        v[i] = v0 + step;
        return loss();
      };
      const double num = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
      v[i] = v0;
      EXPECT_NEAR(an[i], num, 1e-6 * std::max(std::abs(an[i]), std::abs(num)) + 1e-9)
          << "d" << name << " element " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 168 + 56 + 140 + 140 + 3 * 4);
}

TEST(CpuSsd, BackwardAccumulatesParameterGradients) {
  Inputs in = make_inputs(2, 11, 4, 1, 3, 4, DType::F64, 300);
  const Tensor dy = test::random_uniform(in.x.shape(), DType::F64, test::test_seed(310));
  const Tensor p0 = test::random_uniform({4}, DType::F64, test::test_seed(311));
  const Grads fresh = run_bwd(in, dy, 4, Tensor::zeros({4}, DType::F64));
  const Grads acc = run_bwd(in, dy, 4, p0);
  for (auto [a, f] : {std::pair{&acc.ddt_bias, &fresh.ddt_bias}, {&acc.dA_log, &fresh.dA_log}, {&acc.dD, &fresh.dD}})
    for (int64_t h = 0; h < 4; ++h) {
      EXPECT_NE(f->data<double>()[h], 0.0);
      EXPECT_NEAR(a->data<double>()[h], p0.data<double>()[h] + f->data<double>()[h], 1e-12);
    }
  EXPECT_EQ(std::vector<double>(acc.dx.to_f64_vector()), fresh.dx.to_f64_vector());  // activation grads are `=`
}

// A chunk longer than T is one chunk of T, up to INT64_MAX (where T + chunk - 1 used to overflow
// into a negative chunk count and a crash in the backward).
TEST(CpuSsd, HugeChunkSizesEqualOneChunkOfT) {
  Inputs in = make_inputs(1, 9, 2, 1, 3, 4, DType::F64, 400);
  const Tensor dy = test::random_uniform(in.x.shape(), DType::F64, test::test_seed(410));
  const Tensor zero = Tensor::zeros({2}, DType::F64);
  const Grads want = run_bwd(in, dy, 9, zero);
  for (int64_t chunk : {int64_t(10), INT64_MAX / 2, INT64_MAX}) {
    EXPECT_EQ(run_fwd(in, chunk).to_f64_vector(), run_fwd(in, 9).to_f64_vector()) << chunk;
    const Grads g = run_bwd(in, dy, chunk, zero);
    for (auto [a, b] : {std::pair{&g.dx, &want.dx},
                        {&g.ddt_raw, &want.ddt_raw},
                        {&g.dB, &want.dB},
                        {&g.dC, &want.dC},
                        {&g.ddt_bias, &want.ddt_bias},
                        {&g.dA_log, &want.dA_log},
                        {&g.dD, &want.dD}})
      EXPECT_EQ(a->to_f64_vector(), b->to_f64_vector()) << chunk;
  }
}

bool bytes_equal(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

// Two runs give the same bits, and so does a backward that recomputes what the forward kept.
TEST(CudaSsd, TwoRunsAreBitwiseEqualWithOrWithoutTheKeptStates) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 2, T = 1000, H = 16, G = 4, P = 64, N = 128, chunk = 128;
  const Inputs host = make_inputs(B, T, H, G, P, N, DType::BF16, 500);
  const Tensor dy = test::random_uniform(host.x.shape(), DType::BF16, test::test_seed(510)).to(Device::CUDA);
  const Tensor x = host.x.to(Device::CUDA), dt_raw = host.dt_raw.to(Device::CUDA);
  const Tensor Bm = host.Bm.to(Device::CUDA), Cm = host.Cm.to(Device::CUDA);
  const Tensor bias = host.dt_bias.to(Device::CUDA), a_log = host.A_log.to(Device::CUDA), D = host.D.to(Device::CUDA);
  auto run = [&](bool keep) {
    Exec& ex = Exec::cuda();
    std::vector<Tensor> out = {Tensor::empty(x.shape(), DType::BF16, Device::CUDA),
                               Tensor::empty(x.shape(), DType::BF16, Device::CUDA),
                               Tensor::empty(dt_raw.shape(), DType::BF16, Device::CUDA),
                               Tensor::empty(Bm.shape(), DType::BF16, Device::CUDA),
                               Tensor::empty(Cm.shape(), DType::BF16, Device::CUDA),
                               Tensor::zeros({H}, DType::F32, Device::CUDA),
                               Tensor::zeros({H}, DType::F32, Device::CUDA),
                               Tensor::zeros({H}, DType::F32, Device::CUDA)};  // y, dx, ddt_raw, dB, dC, 3 params
    std::vector<Tensor> kept;
    ops::ssd_chunk_scan_fwd(ex, out[0], x, dt_raw, Bm, Cm, bias, a_log, D, chunk, keep ? &kept : nullptr);
    EXPECT_EQ(kept.size(), keep ? 3u : 0u);
    ops::ssd_chunk_scan_bwd(ex, out[1], out[2], out[3], out[4], out[5], out[6], out[7], dy, x, dt_raw, Bm, Cm, bias,
                            a_log, D, chunk, keep ? &kept : nullptr);
    return out;
  };
  const std::vector<Tensor> first = run(true), second = run(true), recomputed = run(false);
  const char* names[] = {"y", "dx", "ddt_raw", "dB", "dC", "ddt_bias", "dA_log", "dD"};
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(bytes_equal(first[i], second[i])) << names[i];
    EXPECT_TRUE(bytes_equal(first[i], recomputed[i])) << names[i] << " (backward recomputing the states)";
  }
}

}  // namespace
}  // namespace hytra
