// Parity cases for attention_fwd / attention_bwd: MHA, GQA and MQA, sequences longer than one
// key tile, fp32 and bf16, value head dims equal to and unlike the query-key head dim. The backward's out and lse come
// from the CPU forward; out is rounded to the case's dtype first so both sides read identical values.
#include <cmath>

#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct AttnSpec {
  int64_t B, T, H, Hkv, D;
  DType dt;
  int64_t Dv = 0;  // the value head dim; 0: D
  int64_t dv() const { return Dv > 0 ? Dv : D; }
};

std::string shape_of(const AttnSpec& s) {
  return "B=" + dims({s.B}) + " T=" + dims({s.T}) + " H=" + dims({s.H}) + "/" + dims({s.Hkv}) + " D=" + dims({s.D}) +
         (s.Dv > 0 ? " Dv=" + dims({s.Dv}) : "");
}

void add_fwd(AttnSpec s) {
  register_case(make_case("attention_fwd", shape_of(s), s.dt, [s](uint64_t seed) {
    const double scale = 1.0 / std::sqrt(double(s.D));
    Tensor q = rand({s.B, s.T, s.H, s.D}, s.dt, seed, -2.0, 2.0);
    Tensor k = rand({s.B, s.T, s.Hkv, s.D}, s.dt, seed + 1, -2.0, 2.0);
    Tensor v = rand({s.B, s.T, s.Hkv, s.dv()}, s.dt, seed + 2);
    const Shape o_shape{s.B, s.T, s.H, s.dv()};
    Tensor og = dev_empty(o_shape, s.dt), lg = dev_empty({s.B, s.H, s.T}, DType::F32);
    Tensor oc = cpu_empty(o_shape), lc = cpu_empty({s.B, s.H, s.T});
    ops::attention_fwd(gpu(), og, lg, dev(q), dev(k), dev(v), scale);
    ops::attention_fwd(cpu(), oc, lc, ref(q), ref(k), ref(v), scale);
    return std::vector<Output>{{"out", og, oc}, {"lse", lg, lc}};
  }));
}

void add_bwd(AttnSpec s) {
  register_case(make_case("attention_bwd", shape_of(s), s.dt, [s](uint64_t seed) {
    const double scale = 1.0 / std::sqrt(double(s.D));
    Tensor q = rand({s.B, s.T, s.H, s.D}, s.dt, seed, -2.0, 2.0);
    Tensor k = rand({s.B, s.T, s.Hkv, s.D}, s.dt, seed + 1, -2.0, 2.0);
    Tensor v = rand({s.B, s.T, s.Hkv, s.dv()}, s.dt, seed + 2);
    Tensor dout = rand({s.B, s.T, s.H, s.dv()}, s.dt, seed + 3);
    Tensor out32 = cpu_empty(dout.shape()), lse = cpu_empty({s.B, s.H, s.T});
    ops::attention_fwd(cpu(), out32, lse, ref(q), ref(k), ref(v), scale);
    Tensor out = as_dtype(out32, s.dt);
    Tensor dqg = dev_empty(q.shape(), s.dt), dkg = dev_empty(k.shape(), s.dt), dvg = dev_empty(v.shape(), s.dt);
    Tensor dqc = cpu_empty(q.shape()), dkc = cpu_empty(k.shape()), dvc = cpu_empty(v.shape());
    ops::attention_bwd(gpu(), dqg, dkg, dvg, dev(dout), dev(q), dev(k), dev(v), dev(out), dev(lse), scale);
    ops::attention_bwd(cpu(), dqc, dkc, dvc, ref(dout), ref(q), ref(k), ref(v), ref(out), lse, scale);
    return std::vector<Output>{{"dq", dqg, dqc}, {"dk", dkg, dkc}, {"dv", dvg, dvc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(attention) {
  const AttnSpec specs[] = {
      {2, 37, 4, 2, 32, DType::F32},
      {1, 300, 2, 2, 64, DType::F32},
      {1, 200, 8, 1, 64, DType::BF16},
      {2, 130, 4, 2, 128, DType::BF16},
      // bf16, head dim 64/128: cuDNN's fused attention where the build has it. GQA with B=2 and T
      // not a multiple of the 64/128 tiles, one MHA case (no GQA reduction), one longer sequence.
      {2, 333, 8, 2, 64, DType::BF16},
      {1, 100, 4, 4, 64, DType::BF16},
      {2, 777, 8, 2, 128, DType::BF16},
      {2, 333, 16, 16, 192, DType::BF16},  // multi-latent attention's dn + dr = 128 + 64 (DeepSeek-V3)
      // Value head dim unlike the query-key one: MLA's dv = 128 with dn + dr = 192 (cuDNN), and the plain kernels.
      {2, 333, 16, 16, 192, DType::BF16, 128},
      {2, 200, 8, 2, 192, DType::BF16, 128},  // with GQA: cuDNN's reduction over each group of the Dv-wide dV
      {1, 150, 4, 4, 192, DType::BF16, 128},
      {2, 45, 4, 2, 48, DType::F32, 24},
      {1, 70, 2, 1, 16, DType::BF16, 40},
  };
  for (const AttnSpec& s : specs) {
    add_fwd(s);
    add_bwd(s);
  }
}

}  // namespace hytra::parity
