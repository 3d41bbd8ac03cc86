// Parity cases for the causal depthwise conv1d, forward and backward: fp32 and bf16, SiLU on and
// off, kernel widths 4, 3 and 2, T shorter than K, odd C (the one-channel-per-thread path) and C
// a multiple of 8 (the 16-byte path), T longer than one time tile of either kernel (window and g
// carried across tile edges), several batches. dw and dbias start random to check `+=`. With pad > 0
// every activation is row-pitched: columns [pad, pad + C) of a (B,T,C+pad) tensor whose other columns
// start random and must come back untouched (the whole tensor is compared).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

std::string btck(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, int64_t pad) {
  return "B=" + dims({B}) + " T=" + dims({T}) + " C=" + dims({C}) + " K=" + dims({K}) + (silu ? " silu" : "") +
         (pad > 0 ? " pitch=" + dims({C + pad}) : "");
}

// Columns [pad, pad + C) of w (B,T,C+pad).
Tensor cols(const Tensor& w, int64_t pad, int64_t C) { return w.narrow(2, pad, C); }

void add_fwd(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, DType dt, int64_t pad) {
  register_case(make_case("conv1d_fwd", btck(B, T, C, K, silu, pad), dt, [=](uint64_t seed) {
    const Shape wide{B, T, C + pad};
    Tensor x = rand(wide, dt, seed, -2.0, 2.0), w = rand({C, K}, dt, seed + 1), b = rand({C}, dt, seed + 2);
    Tensor y = rand(wide, dt, seed + 6), yg = dev(y), yc = ref(y), yg_c = cols(yg, pad, C), yc_c = cols(yc, pad, C);
    ops::conv1d_fwd(gpu(), yg_c, cols(dev(x), pad, C), dev(w), dev(b), silu);
    ops::conv1d_fwd(cpu(), yc_c, cols(ref(x), pad, C), ref(w), ref(b), silu);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

void add_bwd(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, DType dt, int64_t pad) {
  register_case(make_case("conv1d_bwd", btck(B, T, C, K, silu, pad), dt, [=](uint64_t seed) {
    const Shape wide{B, T, C + pad};
    Tensor x = rand(wide, dt, seed, -2.0, 2.0), w = rand({C, K}, dt, seed + 1), b = rand({C}, dt, seed + 2);
    Tensor dy = rand(wide, dt, seed + 3), dx = rand(wide, dt, seed + 6);
    Tensor dw = rand({C, K}, DType::F32, seed + 4), db = rand({C}, DType::F32, seed + 5);
    Tensor dxg = dev(dx), dwg = dev(dw), dbg = dev(db), dxg_c = cols(dxg, pad, C);
    Tensor dxc = ref(dx), dwc = ref(dw), dbc = ref(db), dxc_c = cols(dxc, pad, C);
    ops::conv1d_bwd(gpu(), dxg_c, dwg, dbg, cols(dev(dy), pad, C), cols(dev(x), pad, C), dev(w), dev(b), silu);
    ops::conv1d_bwd(cpu(), dxc_c, dwc, dbc, cols(ref(dy), pad, C), cols(ref(x), pad, C), ref(w), ref(b), silu);
    return std::vector<Output>{{"dx", dxg, dxc}, {"dw", dwg, dwc}, {"dbias", dbg, dbc}};
  }));
}

void add_both(int64_t B, int64_t T, int64_t C, int64_t K, bool silu, DType dt, int64_t pad = 0) {
  add_fwd(B, T, C, K, silu, dt, pad);
  add_bwd(B, T, C, K, silu, dt, pad);
}

}  // namespace

HYTRA_PARITY_CASES(conv1d) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  for (bool silu : {true, false}) {
    add_both(2, 300, 64, 4, silu, f32);  // 16-byte path, several time tiles
    add_both(2, 300, 128, 4, silu, bf16);
    add_both(3, 37, 33, 4, silu, f32);  // odd C: one channel per thread
    add_both(1, 41, 257, 2, silu, bf16);
    add_both(2, 2, 24, 4, silu, f32);  // T < K
    add_both(2, 3, 19, 4, silu, bf16);
  }
  add_both(2, 70, 40, 2, true, f32);
  add_both(1, 600, 80, 3, true, bf16);
  add_both(1, 1, 8, 4, false, bf16);
  add_both(1, 1030, 1000, 4, true, bf16);   // more than one channel block and many tiles
  add_both(2, 300, 96, 4, true, bf16, 48);  // row-pitched, vector path (the Mamba in_proj slice)
  add_both(2, 70, 40, 4, true, f32, 8);
  add_both(2, 70, 40, 3, false, bf16, 3);  // row-pitched, one channel per thread
}

}  // namespace hytra::parity
