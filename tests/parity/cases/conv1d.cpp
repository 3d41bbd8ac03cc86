// Parity cases for the causal depthwise conv1d, forward and backward: fp32 and bf16, SiLU on and
// off, kernel widths 4, 3 and 2, T shorter than K, odd C (the one-channel-per-thread path) and C
// a multiple of 8 (the 16-byte path), T longer than one time tile of either kernel (window and g
// carried across tile edges), several batches. dw and dbias start random to check `+=`.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

std::string btck(int64_t B, int64_t T, int64_t C, int64_t K, bool silu) {
  return "B=" + dims({B}) + " T=" + dims({T}) + " C=" + dims({C}) + " K=" + dims({K}) + (silu ? " silu" : "");
}

void add_fwd(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, DType dt) {
  register_case(make_case("conv1d_fwd", btck(B, T, C, K, silu), dt, [=](uint64_t seed) {
    Tensor x = rand({B, T, C}, dt, seed, -2.0, 2.0), w = rand({C, K}, dt, seed + 1), b = rand({C}, dt, seed + 2);
    Tensor yg = dev_empty({B, T, C}, dt), yc = cpu_empty({B, T, C});
    ops::conv1d_fwd(gpu(), yg, dev(x), dev(w), dev(b), silu);
    ops::conv1d_fwd(cpu(), yc, ref(x), ref(w), ref(b), silu);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

void add_bwd(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, DType dt) {
  register_case(make_case("conv1d_bwd", btck(B, T, C, K, silu), dt, [=](uint64_t seed) {
    Tensor x = rand({B, T, C}, dt, seed, -2.0, 2.0), w = rand({C, K}, dt, seed + 1), b = rand({C}, dt, seed + 2);
    Tensor dy = rand({B, T, C}, dt, seed + 3);
    Tensor dw = rand({C, K}, DType::F32, seed + 4), db = rand({C}, DType::F32, seed + 5);
    Tensor dxg = dev_empty({B, T, C}, dt), dwg = dev(dw), dbg = dev(db);
    Tensor dxc = cpu_empty({B, T, C}), dwc = ref(dw), dbc = ref(db);
    ops::conv1d_bwd(gpu(), dxg, dwg, dbg, dev(dy), dev(x), dev(w), dev(b), silu);
    ops::conv1d_bwd(cpu(), dxc, dwc, dbc, ref(dy), ref(x), ref(w), ref(b), silu);
    return std::vector<Output>{{"dx", dxg, dxc}, {"dw", dwg, dwc}, {"dbias", dbg, dbc}};
  }));
}

void add_both(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, DType dt) {
  add_fwd(B, T, C, K, silu, dt);
  add_bwd(B, T, C, K, silu, dt);
}

}  // namespace

HYTRA_PARITY_CASES(conv1d) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  for (bool silu : {true, false}) {
    add_both(2, 300, 64, 4, silu, f32);   // 16-byte path, several time tiles
    add_both(2, 300, 128, 4, silu, bf16);
    add_both(3, 37, 33, 4, silu, f32);    // odd C: one channel per thread
    add_both(1, 41, 257, 2, silu, bf16);
    add_both(2, 2, 24, 4, silu, f32);     // T < K
    add_both(2, 3, 19, 4, silu, bf16);
  }
  add_both(2, 70, 40, 2, true, f32);
  add_both(1, 600, 80, 3, true, bf16);
  add_both(1, 1, 8, 4, false, bf16);
  add_both(1, 1030, 1000, 4, true, bf16);  // more than one channel block and many tiles
}

}  // namespace hytra::parity
