// Parity cases for the mHC Sinkhorn and coefficient ops: both variants, n = 1, 2, 4, iterations
// 1, 3, 20, more tokens than the parameter-gradient row chunks (512). Every output is compared;
// dalpha and dbias start random (they accumulate). The backward's r comes from the CPU forward,
// shared by both.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

using ops::MhcVariant;

std::string desc(int64_t R, int64_t n, int64_t T, MhcVariant v) {
  return "R=" + dims({R}) + " n=" + dims({n}) + " T=" + dims({T}) + (v == MhcVariant::Dev ? " dev" : " main");
}

void add_sinkhorn(int64_t R, int64_t n, int64_t T, MhcVariant v) {
  register_case(make_case("sinkhorn_fwd", desc(R, n, T, v), DType::F32, [=](uint64_t seed) {
    Tensor l = rand({R, n, n}, DType::F32, seed, -3.0, 3.0);
    Tensor mg = dev_empty({R, n, n}, DType::F32), mc = cpu_empty({R, n, n});
    ops::sinkhorn_fwd(gpu(), mg, dev(l), T, v);
    ops::sinkhorn_fwd(cpu(), mc, ref(l), T, v);
    return std::vector<Output>{{"M", mg, mc}};
  }));
  register_case(make_case("sinkhorn_bwd", desc(R, n, T, v), DType::F32, [=](uint64_t seed) {
    Tensor l = rand({R, n, n}, DType::F32, seed, -3.0, 3.0), dm = rand({R, n, n}, DType::F32, seed + 1);
    Tensor dg = dev_empty({R, n, n}, DType::F32), dc = cpu_empty({R, n, n});
    ops::sinkhorn_bwd(gpu(), dg, dev(dm), dev(l), T, v);
    ops::sinkhorn_bwd(cpu(), dc, ref(dm), ref(l), T, v);
    return std::vector<Output>{{"dlogits", dg, dc}};
  }));
}

struct CoeffInputs {
  Tensor rms, proj, alpha, bias;  // host fp32; alpha (3): alpha_pre, alpha_post, alpha_res
};

// Element g of alpha (3) as the op's (1) tensor.
Tensor at(const Tensor& alpha, int64_t g) { return alpha.narrow(0, g, 1); }

CoeffInputs coeff_inputs(int64_t N, int64_t n, uint64_t seed) {
  const int64_t P = n * n + 2 * n;
  return {rand({N}, DType::F32, seed, 0.0, 2.0), rand({N, P}, DType::F32, seed + 1, -2.0, 2.0),
          rand({3}, DType::F32, seed + 2, -1.0, 1.0), rand({P}, DType::F32, seed + 3, -1.0, 1.0)};
}

void add_coeffs(int64_t N, int64_t n, int64_t T, MhcVariant v) {
  const std::string shape = desc(N, n, T, v);
  register_case(make_case("mhc_coeffs_fwd", shape, DType::F32, [=](uint64_t seed) {
    const CoeffInputs in = coeff_inputs(N, n, seed);
    Tensor pg = dev_empty({N, n}, DType::F32), qg = dev_empty({N, n}, DType::F32);
    Tensor hg = dev_empty({N, n, n}, DType::F32), rg = dev_empty({N}, DType::F32);
    Tensor pc = cpu_empty({N, n}), qc = cpu_empty({N, n}), hc = cpu_empty({N, n, n}), rc = cpu_empty({N});
    const Tensor ag = dev(in.alpha);
    ops::mhc_coeffs_fwd(gpu(), pg, qg, hg, rg, dev(in.rms), dev(in.proj), at(ag, 0), at(ag, 1), at(ag, 2), dev(in.bias),
                        T, v);
    ops::mhc_coeffs_fwd(cpu(), pc, qc, hc, rc, in.rms, in.proj, at(in.alpha, 0), at(in.alpha, 1), at(in.alpha, 2),
                        in.bias, T, v);
    return std::vector<Output>{{"h_pre", pg, pc}, {"h_post", qg, qc}, {"h_res", hg, hc}, {"r", rg, rc}};
  }));
  register_case(make_case("mhc_coeffs_bwd", shape, DType::F32, [=](uint64_t seed) {
    const int64_t P = n * n + 2 * n;
    const CoeffInputs in = coeff_inputs(N, n, seed);
    Tensor h_pre = cpu_empty({N, n}), h_post = cpu_empty({N, n}), h_res = cpu_empty({N, n, n}), r = cpu_empty({N});
    ops::mhc_coeffs_fwd(cpu(), h_pre, h_post, h_res, r, in.rms, in.proj, at(in.alpha, 0), at(in.alpha, 1),
                        at(in.alpha, 2), in.bias, T, v);
    Tensor dpre = rand({N, n}, DType::F32, seed + 4), dpost = rand({N, n}, DType::F32, seed + 5);
    Tensor dres = rand({N, n, n}, DType::F32, seed + 6);
    Tensor dalpha = rand({3}, DType::F32, seed + 8), dbias = rand({P}, DType::F32, seed + 9);
    Tensor dpg = dev_empty({N, P}, DType::F32), drg = dev_empty({N}, DType::F32), dag = dev(dalpha), dbg = dev(dbias);
    Tensor dpc = cpu_empty({N, P}), drc = cpu_empty({N}), dac = dalpha.clone(), dbc = dbias.clone();
    const Tensor ag = dev(in.alpha);
    Tensor dag0 = at(dag, 0), dag1 = at(dag, 1), dag2 = at(dag, 2), dac0 = at(dac, 0), dac1 = at(dac, 1),
           dac2 = at(dac, 2);
    ops::mhc_coeffs_bwd(gpu(), dpg, drg, dag0, dag1, dag2, dbg, dev(dpre), dev(dpost), dev(dres), dev(in.proj),
                        at(ag, 0), at(ag, 1), at(ag, 2), dev(in.bias), dev(r), T, v);
    ops::mhc_coeffs_bwd(cpu(), dpc, drc, dac0, dac1, dac2, dbc, dpre, dpost, dres, in.proj, at(in.alpha, 0),
                        at(in.alpha, 1), at(in.alpha, 2), in.bias, r, T, v);
    return std::vector<Output>{{"dproj", dpg, dpc}, {"dr", drg, drc}, {"dalpha", dag, dac}, {"dbias", dbg, dbc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(mhc) {
  for (MhcVariant v : {MhcVariant::Main, MhcVariant::Dev})
    for (int64_t n : {1, 2, 4})
      for (int64_t T : {1, 3, 20}) {
        add_sinkhorn(300, n, T, v);
        add_coeffs(1100, n, T, v);
      }
  add_sinkhorn(1000, 8, 20, MhcVariant::Main);
  add_sinkhorn(77, 16, 20, MhcVariant::Dev);
  add_coeffs(1000, 8, 20, MhcVariant::Dev);
  // n off the compile-time sizes (3, 6: runtime n in capacities 4 and 8).
  add_sinkhorn(200, 6, 20, MhcVariant::Main);
  add_coeffs(200, 3, 20, MhcVariant::Main);
  add_coeffs(200, 6, 20, MhcVariant::Dev);
}

}  // namespace hytra::parity
