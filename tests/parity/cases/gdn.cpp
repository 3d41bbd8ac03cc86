// Parity cases for the gated delta rule, forward and backward: fp32 and bf16, Hv == Hk and
// Hv = 2 Hk (and 3 heads), dk != dv, dk/dv 64 and 128 and sizes that are not multiples of the
// CUDA tiles (16, 24, 48, 100), T not a multiple of chunk_size, chunk_size > T, one partial chunk
// only, and several whole CUDA chunks (64 steps in bf16, 32 in fp32) with a partial last one. The
// CPU reference runs the chunked form with the case's chunk_size, CUDA its own chunks: equal up to
// rounding. dA_log / ddt_bias start from random non-zero values on both sides, so `+=` is checked.
// The harness runs each case twice and requires bitwise-equal CUDA outputs (determinism).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct Dims {
  int64_t B, T, Hk, Hv, dk, dv, chunk;
};

std::string shape_of(const Dims& d) {
  return "B=" + dims({d.B}) + " T=" + dims({d.T}) + " H=" + dims({d.Hv}) + "/" + dims({d.Hk}) + " d=" +
         dims({d.dk, d.dv}) + " c=" + dims({d.chunk});
}

struct Inputs {
  Tensor q, k;             // (B,T,Hk,dk)
  Tensor v;                // (B,T,Hv,dv)
  Tensor alpha, beta_raw;  // (B,T,Hv)
  Tensor A_log, dt_bias;   // (Hv) fp32
};

Inputs make_inputs(const Dims& d, DType dt, uint64_t seed) {
  return Inputs{rand({d.B, d.T, d.Hk, d.dk}, dt, seed),
                rand({d.B, d.T, d.Hk, d.dk}, dt, seed + 1),
                rand({d.B, d.T, d.Hv, d.dv}, dt, seed + 2),
                rand({d.B, d.T, d.Hv}, dt, seed + 3, -1.5, 1.5),
                rand({d.B, d.T, d.Hv}, dt, seed + 4, -2.0, 2.0),
                rand({d.Hv}, DType::F32, seed + 5, -1.0, 1.0),
                rand({d.Hv}, DType::F32, seed + 6, 0.0, 1.5)};
}

void add_fwd(const Dims& d, DType dt) {
  register_case(make_case("gated_delta_rule_fwd", shape_of(d), dt, [=](uint64_t seed) {
    const Inputs in = make_inputs(d, dt, seed);
    Tensor og = dev_empty({d.B, d.T, d.Hv, d.dv}, dt), oc = cpu_empty({d.B, d.T, d.Hv, d.dv});
    ops::gated_delta_rule_fwd(gpu(), og, dev(in.q), dev(in.k), dev(in.v), dev(in.alpha), dev(in.beta_raw),
                              dev(in.A_log), dev(in.dt_bias), d.chunk);
    ops::gated_delta_rule_fwd(cpu(), oc, ref(in.q), ref(in.k), ref(in.v), ref(in.alpha), ref(in.beta_raw),
                              ref(in.A_log), ref(in.dt_bias), d.chunk);
    return std::vector<Output>{{"o", og, oc}};
  }));
}

void add_bwd(const Dims& d, DType dt) {
  register_case(make_case("gated_delta_rule_bwd", shape_of(d), dt, [=](uint64_t seed) {
    const Inputs in = make_inputs(d, dt, seed);
    const Tensor dout = rand({d.B, d.T, d.Hv, d.dv}, dt, seed + 7);
    const Tensor dA0 = rand({d.Hv}, DType::F32, seed + 8), ddt0 = rand({d.Hv}, DType::F32, seed + 9);
    const Shape qs{d.B, d.T, d.Hk, d.dk}, vs{d.B, d.T, d.Hv, d.dv}, gs{d.B, d.T, d.Hv};
    Tensor dqg = dev_empty(qs, dt), dkg = dev_empty(qs, dt), dvg = dev_empty(vs, dt);
    Tensor dag = dev_empty(gs, dt), dbg = dev_empty(gs, dt), dAg = dev(dA0), ddtg = dev(ddt0);
    Tensor dqc = cpu_empty(qs), dkc = cpu_empty(qs), dvc = cpu_empty(vs);
    Tensor dac = cpu_empty(gs), dbc = cpu_empty(gs), dAc = ref(dA0), ddtc = ref(ddt0);
    ops::gated_delta_rule_bwd(gpu(), dqg, dkg, dvg, dag, dbg, dAg, ddtg, dev(dout), dev(in.q), dev(in.k),
                              dev(in.v), dev(in.alpha), dev(in.beta_raw), dev(in.A_log), dev(in.dt_bias), d.chunk);
    ops::gated_delta_rule_bwd(cpu(), dqc, dkc, dvc, dac, dbc, dAc, ddtc, ref(dout), ref(in.q), ref(in.k),
                              ref(in.v), ref(in.alpha), ref(in.beta_raw), ref(in.A_log), ref(in.dt_bias), d.chunk);
    // dalpha_t comes from a suffix sum over the chunk of mixed-sign per-step terms (dg_t = sum_{s>=t} dgam_s):
    // the bf16 rounding of the terms stays, the sum cancels, so its norm error runs about twice the others'.
    const double dalpha_tol = dt == DType::BF16 ? 1e-2 : 0.0;  // 0: the case's default
    return std::vector<Output>{{"dq", dqg, dqc},
                               {"dk", dkg, dkc},
                               {"dv", dvg, dvc},
                               {"dalpha", dag, dac, dalpha_tol},
                               {"dbeta_raw", dbg, dbc},
                               {"dA_log", dAg, dAc},
                               {"ddt_bias", ddtg, ddtc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(gdn) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const Dims shapes[] = {
      {2, 100, 2, 2, 32, 32, 64},    // Hv == Hk, T % chunk != 0
      {1, 37, 2, 4, 64, 48, 64},     // Hv = 2 Hk, chunk > T (one partial chunk), dk != dv
      {1, 200, 1, 2, 16, 24, 16},    // several chunks, the last partial; dims below one tile
      {2, 130, 2, 4, 128, 128, 64},  // the model's head dims, Hv = 2 Hk
      {1, 50, 3, 3, 24, 100, 32},    // dv not a multiple of 32, dk not a power of two
      {1, 300, 2, 2, 64, 64, 64},    // Hv == Hk, d 64, four whole bf16 chunks and a partial one
      {2, 160, 1, 2, 128, 64, 64},   // dk 128 with dv 64, Hv = 2 Hk
  };
  for (const Dims& d : shapes) {
    add_fwd(d, f32);
    add_bwd(d, f32);
  }
  for (int i : {1, 3, 4, 5, 6}) {
    add_fwd(shapes[i], bf16);
    add_bwd(shapes[i], bf16);
  }
}

}  // namespace hytra::parity
