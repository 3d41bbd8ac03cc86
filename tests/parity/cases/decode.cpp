// Parity cases for the one-token decoding ops: fp32 (elementwise) and bf16 (relative norm). Caches and states start
// random, the same values on both sides (the ops update them in place), and every output is compared, the updated
// caches and states included; cache rows past `position` hold garbage that must come back untouched.
// attention_decode: position 0, a middle one and the caches' last row, H/Hkv 1 and 4, rotary_dim D, partial and 0,
// rotate-half and interleaved, D not a multiple of 32, and positions in the thousands. conv1d_step: K 4 and 2, SiLU
// on and off. ssd_step: H/G 1 and 4, P 64, N 16 and 128, and sizes below a warp. gdn_step: Hv/Hk 1 and 2, dk = dv
// 64 and 128, dk != dv. Parameter ranges as the sequence ops' cases (ssd.cpp, gdn.cpp).
#include <cmath>
#include <vector>

#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct AttnSpec {
  int64_t B, S, H, Hkv, D, pos, R;
  bool interleaved;
};

std::string text(const AttnSpec& s) {
  return "B=" + dims({s.B}) + " S=" + dims({s.S}) + " H=" + dims({s.H}) + "/" + dims({s.Hkv}) + " D=" + dims({s.D}) +
         " pos=" + dims({s.pos}) + " R=" + dims({s.R}) + (s.interleaved ? " il" : "");
}

void add_attention(const AttnSpec& s, DType dt) {
  register_case(make_case("attention_decode", text(s), dt, [=](uint64_t seed) {
    const Shape cache{s.B, s.S, s.Hkv, s.D};
    const Tensor q = rand({s.B, s.H, s.D}, dt, seed, -2.0, 2.0), k = rand({s.B, s.Hkv, s.D}, dt, seed + 1, -2.0, 2.0);
    const Tensor v = rand({s.B, s.Hkv, s.D}, dt, seed + 2);
    const Tensor k0 = rand(cache, dt, seed + 3, -2.0, 2.0), v0 = rand(cache, dt, seed + 4);
    const double scale = 1.0 / std::sqrt(double(s.D)), base = 10000.0;
    Tensor og = dev_empty(q.shape(), dt), kg = dev(k0), vg = dev(v0);
    Tensor oc = cpu_empty(q.shape()), kc = ref(k0), vc = ref(v0);
    ops::attention_decode(gpu(), og, kg, vg, dev(q), dev(k), dev(v), s.pos, scale, s.R, base, s.interleaved);
    ops::attention_decode(cpu(), oc, kc, vc, ref(q), ref(k), ref(v), s.pos, scale, s.R, base, s.interleaved);
    return std::vector<Output>{{"out", og, oc}, {"k_cache", kg, kc}, {"v_cache", vg, vc}};
  }));
}

void add_conv1d(int64_t B, int64_t C, int64_t K, bool silu, DType dt) {
  const std::string shape = "B=" + dims({B}) + " C=" + dims({C}) + " K=" + dims({K}) + (silu ? " silu" : "");
  register_case(make_case("conv1d_step", shape, dt, [=](uint64_t seed) {
    const Tensor x = rand({B, C}, dt, seed, -2.0, 2.0), w = rand({C, K}, dt, seed + 1), b = rand({C}, dt, seed + 2);
    const Tensor s0 = rand({B, K - 1, C}, dt, seed + 3, -2.0, 2.0);
    Tensor yg = dev_empty(x.shape(), dt), sg = dev(s0), yc = cpu_empty(x.shape()), sc = ref(s0);
    ops::conv1d_step(gpu(), yg, sg, dev(x), dev(w), dev(b), silu);
    ops::conv1d_step(cpu(), yc, sc, ref(x), ref(w), ref(b), silu);
    return std::vector<Output>{{"y", yg, yc}, {"state", sg, sc}};
  }));
}

void add_ssd(int64_t B, int64_t H, int64_t G, int64_t P, int64_t N, DType dt) {
  const std::string shape =
      "B=" + dims({B}) + " H=" + dims({H}) + " G=" + dims({G}) + " P=" + dims({P}) + " N=" + dims({N});
  register_case(make_case("ssd_step", shape, dt, [=](uint64_t seed) {
    const Tensor x = rand({B, H, P}, dt, seed), dt_raw = rand({B, H}, dt, seed + 1, -4.0, 0.0);
    const Tensor Bm = rand({B, G, N}, dt, seed + 2), Cm = rand({B, G, N}, dt, seed + 3);
    const Tensor dt_bias = rand({H}, DType::F32, seed + 4, -1.0, 0.5), D = rand({H}, DType::F32, seed + 6, 0.5, 1.5);
    Tensor A_log = rand({H}, DType::F32, seed + 5, 1.0, 16.0);
    std::vector<double> a = A_log.to_f64_vector();
    for (double& e : a) e = std::log(e);
    A_log.copy_from_f64(a);
    const Tensor s0 = rand({B, H, P, N}, DType::F32, seed + 7);
    Tensor yg = dev_empty(x.shape(), dt), sg = dev(s0), yc = cpu_empty(x.shape()), sc = ref(s0);
    ops::ssd_step(gpu(), yg, sg, dev(x), dev(dt_raw), dev(Bm), dev(Cm), dev(dt_bias), dev(A_log), dev(D));
    ops::ssd_step(cpu(), yc, sc, ref(x), ref(dt_raw), ref(Bm), ref(Cm), ref(dt_bias), ref(A_log), ref(D));
    return std::vector<Output>{{"y", yg, yc}, {"state", sg, sc}};
  }));
}

void add_gdn(int64_t B, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, DType dt) {
  const std::string shape = "B=" + dims({B}) + " H=" + dims({Hv}) + "/" + dims({Hk}) + " d=" + dims({dk, dv});
  register_case(make_case("gdn_step", shape, dt, [=](uint64_t seed) {
    const Tensor q = rand({B, Hk, dk}, dt, seed), k = rand({B, Hk, dk}, dt, seed + 1),
                 v = rand({B, Hv, dv}, dt, seed + 2);
    const Tensor alpha = rand({B, Hv}, dt, seed + 3, -1.5, 1.5), beta_raw = rand({B, Hv}, dt, seed + 4, -2.0, 2.0);
    const Tensor A_log = rand({Hv}, DType::F32, seed + 5), dt_bias = rand({Hv}, DType::F32, seed + 6, 0.0, 1.5);
    const Tensor s0 = rand({B, Hv, dv, dk}, DType::F32, seed + 7);
    Tensor og = dev_empty(v.shape(), dt), sg = dev(s0), oc = cpu_empty(v.shape()), sc = ref(s0);
    ops::gdn_step(gpu(), og, sg, dev(q), dev(k), dev(v), dev(alpha), dev(beta_raw), dev(A_log), dev(dt_bias));
    ops::gdn_step(cpu(), oc, sc, ref(q), ref(k), ref(v), ref(alpha), ref(beta_raw), ref(A_log), ref(dt_bias));
    return std::vector<Output>{{"o", og, oc}, {"state", sg, sc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(decode) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const AttnSpec attn[] = {
      {2, 64, 4, 4, 64, 0, 64, false},         // position 0 (one key), MHA
      {2, 64, 8, 2, 64, 0, 64, true},          // position 0, GQA 4, interleaved
      {2, 100, 8, 2, 64, 57, 64, false},       // a middle position, GQA 4
      {1, 128, 4, 4, 128, 127, 128, true},     // the caches' last row, interleaved
      {2, 90, 8, 2, 96, 41, 32, false},        // partial rotary_dim (channels 32.. pass through)
      {1, 70, 4, 1, 64, 69, 48, true},         // partial interleaved, one KV head for 4, last row
      {2, 50, 4, 4, 64, 20, 0, false},         // no rotation
      {1, 40, 2, 2, 40, 39, 20, false},        // D not a multiple of 32, last row
      {1, 3000, 8, 2, 128, 2999, 0, false},    // keys in the thousands
      {2, 4096, 8, 2, 128, 2500, 128, false},  // ... with the rotation at a large angle
      {1, 4096, 4, 1, 64, 4095, 64, true},     // ... interleaved, the last row of a long cache
  };
  for (const AttnSpec& s : attn) {
    add_attention(s, f32);
    add_attention(s, bf16);
  }
  for (DType dt : {f32, bf16})
    for (bool silu : {true, false}) {
      add_conv1d(2, 64, 4, silu, dt);
      add_conv1d(3, 37, 2, silu, dt);
      add_conv1d(1, 1000, 4, silu, dt);  // several blocks
    }
  for (DType dt : {f32, bf16}) {
    add_ssd(2, 4, 4, 64, 16, dt);    // H/G 1, N 16
    add_ssd(2, 8, 2, 64, 128, dt);   // H/G 4, N 128
    add_ssd(1, 4, 1, 64, 128, dt);   // H/G 4, one group
    add_ssd(2, 3, 3, 5, 7, dt);      // P, N below a warp
    add_gdn(2, 2, 2, 64, 64, dt);    // Hv/Hk 1, d 64
    add_gdn(1, 2, 4, 128, 128, dt);  // Hv/Hk 2, d 128
    add_gdn(2, 1, 2, 128, 64, dt);   // dk != dv
    add_gdn(1, 3, 3, 24, 100, dt);   // dk below a warp, dv not a multiple of the 8 warps
  }
}

}  // namespace hytra::parity
