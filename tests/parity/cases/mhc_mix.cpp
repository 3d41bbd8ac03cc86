// Parity cases for the mHC stream mixing (aggregate and combine, forward and backward; docs/spec/mhc.md
// §2 steps 5-6): n = 1, 2, 4 (and 3, 8, 16 for the other stream bounds of the kernels), C odd
// (the scalar path) and C = 2048 (16-byte vectors), fp32 and bf16, every output. Coefficients are
// fp32 in their ranges (h_pre, h_res in [0,1), h_post in [0,2)); aggregate_bwd's dX starts random
// to check `+=`; a second backward case leaves dX undefined (dh_pre alone).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

std::string desc(int64_t N, int64_t n, int64_t C) { return "N=" + dims({N}) + " n=" + dims({n}) + " C=" + dims({C}); }

void add_aggregate(int64_t N, int64_t n, int64_t C, DType dt) {
  register_case(make_case("mhc_aggregate_fwd", desc(N, n, C), dt, [=](uint64_t seed) {
    Tensor X = rand({N, n, C}, dt, seed, -2.0, 2.0), h_pre = rand({N, n}, DType::F32, seed + 1, 0.0, 1.0);
    Tensor ug = dev_empty({N, C}, dt), uc = cpu_empty({N, C});
    ops::mhc_aggregate_fwd(gpu(), ug, dev(X), dev(h_pre));
    ops::mhc_aggregate_fwd(cpu(), uc, ref(X), ref(h_pre));
    return std::vector<Output>{{"u", ug, uc}};
  }));
  register_case(make_case("mhc_aggregate_bwd", desc(N, n, C), dt, [=](uint64_t seed) {
    Tensor X = rand({N, n, C}, dt, seed, -2.0, 2.0), h_pre = rand({N, n}, DType::F32, seed + 1, 0.0, 1.0);
    Tensor du = rand({N, C}, dt, seed + 2), dX = rand({N, n, C}, dt, seed + 3);
    Tensor dXg = dev(dX), dhg = dev_empty({N, n}, DType::F32);
    Tensor dXc = ref(dX), dhc = cpu_empty({N, n});
    ops::mhc_aggregate_bwd(gpu(), dXg, dhg, dev(du), dev(X), dev(h_pre));
    ops::mhc_aggregate_bwd(cpu(), dXc, dhc, ref(du), ref(X), ref(h_pre));
    return std::vector<Output>{{"dX", dXg, dXc}, {"dh_pre", dhg, dhc}};
  }));
  register_case(make_case("mhc_aggregate_bwd", desc(N, n, C) + " dh_pre only", dt, [=](uint64_t seed) {
    Tensor X = rand({N, n, C}, dt, seed, -2.0, 2.0), h_pre = rand({N, n}, DType::F32, seed + 1, 0.0, 1.0);
    Tensor du = rand({N, C}, dt, seed + 2), none_g, none_c;
    Tensor dhg = dev_empty({N, n}, DType::F32), dhc = cpu_empty({N, n});
    ops::mhc_aggregate_bwd(gpu(), none_g, dhg, dev(du), dev(X), dev(h_pre));
    ops::mhc_aggregate_bwd(cpu(), none_c, dhc, ref(du), ref(X), ref(h_pre));
    return std::vector<Output>{{"dh_pre", dhg, dhc}};
  }));
}

void add_combine(int64_t N, int64_t n, int64_t C, DType dt) {
  register_case(make_case("mhc_combine_fwd", desc(N, n, C), dt, [=](uint64_t seed) {
    Tensor X = rand({N, n, C}, dt, seed, -2.0, 2.0), F = rand({N, C}, dt, seed + 1, -2.0, 2.0);
    Tensor h_res = rand({N, n, n}, DType::F32, seed + 2, 0.0, 1.0);
    Tensor h_post = rand({N, n}, DType::F32, seed + 3, 0.0, 2.0);
    Tensor Yg = dev_empty({N, n, C}, dt), Yc = cpu_empty({N, n, C});
    ops::mhc_combine_fwd(gpu(), Yg, dev(X), dev(F), dev(h_res), dev(h_post));
    ops::mhc_combine_fwd(cpu(), Yc, ref(X), ref(F), ref(h_res), ref(h_post));
    return std::vector<Output>{{"Y", Yg, Yc}};
  }));
  register_case(make_case("mhc_combine_bwd", desc(N, n, C), dt, [=](uint64_t seed) {
    Tensor X = rand({N, n, C}, dt, seed, -2.0, 2.0), F = rand({N, C}, dt, seed + 1, -2.0, 2.0);
    Tensor h_res = rand({N, n, n}, DType::F32, seed + 2, 0.0, 1.0);
    Tensor h_post = rand({N, n}, DType::F32, seed + 3, 0.0, 2.0);
    Tensor dY = rand({N, n, C}, dt, seed + 4);
    Tensor dXg = dev_empty({N, n, C}, dt), dFg = dev_empty({N, C}, dt);
    Tensor dhrg = dev_empty({N, n, n}, DType::F32), dhpg = dev_empty({N, n}, DType::F32);
    Tensor dXc = cpu_empty({N, n, C}), dFc = cpu_empty({N, C}), dhrc = cpu_empty({N, n, n}), dhpc = cpu_empty({N, n});
    ops::mhc_combine_bwd(gpu(), dXg, dFg, dhrg, dhpg, dev(dY), dev(X), dev(F), dev(h_res), dev(h_post));
    ops::mhc_combine_bwd(cpu(), dXc, dFc, dhrc, dhpc, ref(dY), ref(X), ref(F), ref(h_res), ref(h_post));
    return std::vector<Output>{{"dX", dXg, dXc}, {"dF", dFg, dFc}, {"dh_res", dhrg, dhrc}, {"dh_post", dhpg, dhpc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(mhc_mix) {
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t n : {1, 2, 4})
      for (int64_t C : {333, 2048}) {
        add_aggregate(37, n, C, dt);
        add_combine(37, n, C, dt);
      }
  for (int64_t n : {3, 8, 16}) {
    add_aggregate(9, n, 96, DType::F32);
    add_combine(9, n, 96, DType::F32);
    add_combine(5, n, 77, DType::BF16);
  }
}

}  // namespace hytra::parity
