// Parity cases for the gated RMSNorm, forward and backward: fp32 and bf16, gate after the norm
// (Mamba-2) and before it (gated delta net), w of length C and of length group_size (shared by the
// groups), group sizes on the 16-byte path (multiples of 8) and off it (odd), one group per row,
// more rows than the weight-gradient chunks. Backward rstd comes from the CPU forward; dw starts
// random to check `+=`. With pad > 0, z and dz are row-pitched: columns [pad, pad + C) of an (N, C+pad)
// tensor (dz's other columns start random and must come back untouched: the whole tensor is compared).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

constexpr double kEps = 1e-5;

std::string desc(int64_t N, int64_t C, int64_t gs, bool w_full, bool nbg, int64_t pad) {
  return "N=" + dims({N}) + " C=" + dims({C}) + " gs=" + dims({gs}) + (w_full ? " w=C" : " w=gs") +
         (nbg ? " norm-gate" : " gate-norm") + (pad > 0 ? " z-pitch=" + dims({C + pad}) : "");
}

void add_fwd(int64_t N, int64_t C, int64_t gs, bool w_full, bool nbg, DType dt, int64_t pad) {
  register_case(make_case("gated_rmsnorm_fwd", desc(N, C, gs, w_full, nbg, pad), dt, [=](uint64_t seed) {
    const int64_t G = C / gs, M = w_full ? C : gs;
    Tensor x = rand({N, C}, dt, seed, -2.0, 2.0), z = rand({N, C + pad}, dt, seed + 1, -3.0, 3.0);
    Tensor w = rand({M}, dt, seed + 2, 0.5, 1.5);
    Tensor yg = dev_empty({N, C}, dt), rg = dev_empty({N, G}, DType::F32);
    Tensor yc = cpu_empty({N, C}), rc = cpu_empty({N, G});
    ops::gated_rmsnorm_fwd(gpu(), yg, rg, dev(x), dev(z).narrow(1, pad, C), dev(w), gs, kEps, nbg);
    ops::gated_rmsnorm_fwd(cpu(), yc, rc, ref(x), ref(z).narrow(1, pad, C), ref(w), gs, kEps, nbg);
    return std::vector<Output>{{"y", yg, yc}, {"rstd", rg, rc}};
  }));
}

void add_bwd(int64_t N, int64_t C, int64_t gs, bool w_full, bool nbg, DType dt, int64_t pad) {
  register_case(make_case("gated_rmsnorm_bwd", desc(N, C, gs, w_full, nbg, pad), dt, [=](uint64_t seed) {
    const int64_t G = C / gs, M = w_full ? C : gs;
    Tensor x = rand({N, C}, dt, seed, -2.0, 2.0), z = rand({N, C + pad}, dt, seed + 1, -3.0, 3.0);
    Tensor w = rand({M}, dt, seed + 2, 0.5, 1.5), dy = rand({N, C}, dt, seed + 3);
    Tensor dw = rand({M}, DType::F32, seed + 4), dz = rand({N, C + pad}, dt, seed + 5);
    Tensor zc = ref(z).narrow(1, pad, C), y = cpu_empty({N, C}), rstd = cpu_empty({N, G});
    ops::gated_rmsnorm_fwd(cpu(), y, rstd, ref(x), zc, ref(w), gs, kEps, nbg);
    Tensor dxg = dev_empty({N, C}, dt), dzg = dev(dz), dwg = dev(dw), dzg_c = dzg.narrow(1, pad, C);
    Tensor dxc = cpu_empty({N, C}), dzc = ref(dz), dwc = ref(dw), dzc_c = dzc.narrow(1, pad, C);
    ops::gated_rmsnorm_bwd(gpu(), dxg, dzg_c, dwg, dev(dy), dev(x), dev(z).narrow(1, pad, C), dev(w), dev(rstd), gs,
                           nbg);
    ops::gated_rmsnorm_bwd(cpu(), dxc, dzc_c, dwc, ref(dy), ref(x), zc, ref(w), rstd, gs, nbg);
    return std::vector<Output>{{"dx", dxg, dxc}, {"dz", dzg, dzc}, {"dw", dwg, dwc}};
  }));
}

void add_both(int64_t N, int64_t C, int64_t gs, bool w_full, bool nbg, DType dt, int64_t pad = 0) {
  add_fwd(N, C, gs, w_full, nbg, dt, pad);
  add_bwd(N, C, gs, w_full, nbg, dt, pad);
}

}  // namespace

HYTRA_PARITY_CASES(gated_rmsnorm) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  for (bool nbg : {false, true})
    for (bool w_full : {true, false}) {
      add_both(300, 512, 128, w_full, nbg, f32);  // register path, several weight-gradient row chunks
      add_both(64, 1024, 64, w_full, nbg, bf16);
      add_both(40, 231, 33, w_full, nbg, f32);  // odd group size: one element per lane step
      add_both(33, 105, 7, w_full, nbg, bf16);
    }
  for (bool nbg : {false, true}) {
    add_both(17, 2048, 2048, true, nbg, bf16);  // one group per row
    add_both(130, 96, 96, false, nbg, f32);
  }
  add_both(8, 4096, 1024, true, false, bf16);        // Mamba-2 mixer norm: 4 groups, w (C)
  add_both(200, 4096, 512, true, false, bf16);       // nemotron-h-1b's mixer norm (8 groups), several row chunks
  add_both(300, 2048, 1024, true, false, f32);       // loop path (a unit over 4 vectors a lane), several row chunks
  add_both(16, 4096, 128, false, true, bf16);        // gated delta net out_norm: 32 heads, w (dv)
  add_both(8, 4096, 1024, true, false, bf16, 6208);  // z read in place from the Mamba in_proj output
  add_both(40, 231, 33, false, true, f32, 5);        // row-pitched z off the 16-byte path
}

}  // namespace hytra::parity
