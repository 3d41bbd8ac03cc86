// Parity cases for the experts' grouped GEMMs (grouped_gemm, grouped_gemm_wgrad, grouped_gemm_glu). Group sizes
// come from a routing: many rows per expert (the moe-2b layer scaled down), experts with 0 and 1 rows
// (E = 256 over few rows), half the rows on one expert (skewed), top-k 1 to 8. bf16 cases with sizes that
// are multiples of 8 run the Hopper kernel (tiles cut by group ends, column and K tails); fp32 and odd sizes
// run the plain kernels. The GLU cases cover SwiGLU and quick-GeGLU, the plain layout and interleaves below,
// at and above the kernel's 128-column tile, with and without clamp and offset; one more case checks the
// fused GLU equals the grouped GEMM followed by moe_act_fwd bit for bit on the device. "tail" cases end the
// groups before the last rows (the capacity plan's layout): those rows of the inputs are NaN, of the outputs
// a fill value that must survive (the fused GLU's y there is unspecified).
#include <algorithm>
#include <limits>
#include <random>
#include <sstream>

#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

using Kind = ops::ExpertActivation;

// Offsets (E+1) of the rows of N tokens routed top-k over E experts: each token picks k distinct experts
// (with `skew`, every even token's first pick is expert 0), rows grouped by expert.
Tensor routed_offsets(int64_t N, int64_t k, int64_t E, bool skew, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> count(size_t(E), 0), pool(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t e = 0; e < E; ++e) pool[size_t(e)] = e;
    for (int64_t j = 0; j < k; ++j) {
      std::swap(pool[size_t(j)], pool[size_t(j + int64_t(gen() % uint64_t(E - j)))]);
      if (j == 0 && skew && t % 2 == 0) std::swap(pool[0], *std::find(pool.begin(), pool.end(), 0));
      ++count[size_t(pool[size_t(j)])];
    }
  }
  Tensor o = Tensor::empty({E + 1}, DType::I32);
  int32_t* p = o.data<int32_t>();
  p[0] = 0;
  for (int64_t e = 0; e < E; ++e) p[e + 1] = p[e] + int32_t(count[size_t(e)]);
  return o;
}

// Rows [from, R) of a (R, ...) host tensor set to NaN.
Tensor nan_rows(Tensor t, int64_t from) {
  const int64_t row = t.numel() / t.size(0);
  for (int64_t i = from * row; i < t.numel(); ++i) {
    if (t.dtype() == DType::BF16)
      static_cast<uint16_t*>(t.raw())[i] = 0x7FC0;
    else
      static_cast<float*>(t.raw())[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return t;
}

struct Shape3 {
  int64_t N, k, E;  // tokens, top-k, experts: R = N k rows
  bool skew;
  std::string text() const {
    std::ostringstream s;
    s << "tokens=" << N << " k=" << k << " E=" << E << (skew ? " skewed" : "");
    return s.str();
  }
};

void add_gemm(const Shape3& s, int64_t Nout, int64_t K, bool trans_w, DType dt, int64_t tail = 0) {
  const std::string shape = s.text() + " N=" + dims({Nout}) + " K=" + dims({K}) + (trans_w ? " fwd" : " dgrad") +
                            (tail ? " tail=" + dims({tail}) : "");
  register_case(make_case("grouped_gemm", shape, dt, [=](uint64_t seed) {
    const Tensor off = routed_offsets(s.N, s.k, s.E, s.skew, seed);
    const int64_t used = s.N * s.k, R = used + tail;
    Tensor a = nan_rows(rand({R, K}, dt, seed + 1), used);
    Tensor w = rand(trans_w ? Shape{s.E, Nout, K} : Shape{s.E, K, Nout}, dt, seed + 2);
    const Tensor fill = rand({R, Nout}, dt, seed + 3);
    Tensor yg = dev(fill), yc = ref(fill);
    ops::grouped_gemm(gpu(), yg, dev(a), dev(w), dev(off), trans_w);
    ops::grouped_gemm(cpu(), yc, ref(a), ref(w), off, trans_w);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

void add_wgrad(const Shape3& s, int64_t Nout, int64_t K, float beta, DType dt, int64_t tail = 0) {
  const std::string shape = s.text() + " N=" + dims({Nout}) + " K=" + dims({K}) +
                            (beta == 0.0f ? " beta=0" : " beta=1") + (tail ? " tail=" + dims({tail}) : "");
  register_case(make_case("grouped_gemm_wgrad", shape, dt, [=](uint64_t seed) {
    const Tensor off = routed_offsets(s.N, s.k, s.E, s.skew, seed);
    const int64_t used = s.N * s.k, R = used + tail;
    Tensor dy = nan_rows(rand({R, Nout}, dt, seed + 1), used), x = nan_rows(rand({R, K}, dt, seed + 2), used);
    Tensor dw0 = rand({s.E, Nout, K}, DType::F32, seed + 3);
    Tensor dwg = dev(dw0), dwc = ref(dw0);
    ops::grouped_gemm_wgrad(gpu(), dwg, dev(dy), dev(x), dev(off), beta);
    ops::grouped_gemm_wgrad(cpu(), dwc, ref(dy), ref(x), off, beta);
    return std::vector<Output>{{"dw", dwg, dwc}};
  }));
}

void add_glu(const Shape3& s, int64_t F, int64_t K, int64_t I, Kind act, double clamp, double offset, DType dt,
             int64_t tail = 0) {
  std::ostringstream shape;
  shape << s.text() << " F=" << F << " K=" << K << " I=" << I << (act == Kind::SwiGLU ? " swiglu" : " qgeglu")
        << " L=" << clamp << " off=" << offset;
  if (tail) shape << " tail=" << tail;
  register_case(make_case("grouped_gemm_glu", shape.str(), dt, [=](uint64_t seed) {
    const Tensor off = routed_offsets(s.N, s.k, s.E, s.skew, seed);
    const int64_t used = s.N * s.k, R = used + tail;
    Tensor a = nan_rows(rand({R, K}, dt, seed + 1), used), w = rand({s.E, 2 * F, K}, dt, seed + 2);
    Tensor p = nan_rows(rand({R}, DType::F32, seed + 3, 0.0, 1.0), used);
    const Tensor hfill = rand({R, 2 * F}, dt, seed + 4), yfill = rand({R, F}, dt, seed + 5);
    Tensor hg = dev(hfill), yg = dev(yfill), hc = ref(hfill), yc = ref(yfill);
    ops::grouped_gemm_glu(gpu(), hg, yg, dev(a), dev(w), dev(off), dev(p), act, I, offset, clamp);
    ops::grouped_gemm_glu(cpu(), hc, yc, ref(a), ref(w), off, ref(p), act, I, offset, clamp);
    return std::vector<Output>{{"h", hg, hc}, {"y", yg.narrow(0, 0, used), yc.narrow(0, 0, used)}};  // y: groups' rows
  }));
}

// The fused GLU against the device's own unfused path: equal bits.
void add_glu_fused_equals_unfused(const Shape3& s, int64_t F, int64_t K, int64_t I, Kind act = Kind::SwiGLU,
                                  double clamp = 0.0, double offset = 0.0) {
  std::ostringstream text;
  text << s.text() << " F=" << F << " K=" << K << " I=" << I << (act == Kind::SwiGLU ? " swiglu" : " qgeglu")
       << " L=" << clamp << " off=" << offset << " fused=unfused";
  const std::string shape = text.str();
  Case c = make_case("grouped_gemm_glu", shape, DType::BF16, [=](uint64_t seed) {
    const Tensor off = routed_offsets(s.N, s.k, s.E, s.skew, seed);
    const int64_t R = s.N * s.k;
    Tensor a = dev(rand({R, K}, DType::BF16, seed + 1)), w = dev(rand({s.E, 2 * F, K}, DType::BF16, seed + 2));
    Tensor p = dev(rand({R}, DType::F32, seed + 3, 0.0, 1.0)), o = dev(off);
    Tensor hf = dev_empty({R, 2 * F}, DType::BF16), yf = dev_empty({R, F}, DType::BF16);
    Tensor hu = dev_empty({R, 2 * F}, DType::BF16), yu = dev_empty({R, F}, DType::BF16);
    ops::grouped_gemm_glu(gpu(), hf, yf, a, w, o, p, act, I, offset, clamp);
    ops::grouped_gemm(gpu(), hu, a, w, o, true);
    ops::moe_act_fwd(gpu(), yu, hu, p, act, I, offset, clamp);
    return std::vector<Output>{{"h", hf, hu.to(Device::CPU)}, {"y", yf, yu.to(Device::CPU)}};
  });
  c.criterion = Criterion::Exact;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(grouped_gemm) {
  const Shape3 many{512, 6, 8, false};     // ~384 rows an expert: several row tiles, one cut by the group end
  const Shape3 skewed{512, 6, 8, true};    // expert 0 holds half the rows
  const Shape3 sparse{40, 8, 256, false};  // E = 256: most experts 0 or 1 row
  const Shape3 top1{300, 1, 16, false};
  for (bool trans_w : {true, false}) {
    add_gemm(many, 512, 256, trans_w, DType::BF16);
    add_gemm(skewed, 256, 512, trans_w, DType::BF16);
    add_gemm(sparse, 264, 200, trans_w, DType::BF16);  // column tail (264 = 256 + 8), K tail (200 = 3 x 64 + 8)
    add_gemm(top1, 128, 64, trans_w, DType::BF16);
    add_gemm(many, 96, 64, trans_w, DType::F32);   // the plain kernel
    add_gemm(top1, 36, 20, trans_w, DType::BF16);  // odd sizes: the plain kernel
  }
  for (float beta : {0.0f, 1.0f}) {
    add_wgrad(many, 512, 256, beta, DType::BF16);
    add_wgrad(skewed, 136, 264, beta, DType::BF16);  // row and column tails
    add_wgrad(sparse, 128, 256, beta, DType::BF16);  // empty groups: beta dw
    add_wgrad(top1, 64, 72, beta, DType::BF16);
    add_wgrad(many, 40, 24, beta, DType::F32);
  }
  add_glu(many, 256, 256, 0, Kind::SwiGLU, 0.0, 0.0, DType::BF16);       // plain, two column tiles
  add_glu(skewed, 512, 128, 256, Kind::SwiGLU, 0.0, 0.0, DType::BF16);   // interleave above the tile
  add_glu(many, 256, 192, 16, Kind::QuickGeGLU, 0.5, 1.0, DType::BF16);  // interleave below the tile, clamp
  add_glu(sparse, 64, 256, 0, Kind::SwiGLU, 0.5, 1.0, DType::BF16);      // F below the tile
  add_glu(top1, 128, 64, 32, Kind::QuickGeGLU, 0.0, 1.0, DType::BF16);
  add_glu(top1, 36, 40, 0, Kind::SwiGLU, 0.0, 0.0, DType::BF16);  // odd F: the unfused path
  add_glu(many, 64, 64, 8, Kind::SwiGLU, 0.5, 0.0, DType::F32);
  add_glu_fused_equals_unfused(many, 256, 256, 0);
  add_glu_fused_equals_unfused(skewed, 512, 128, 16);
  add_glu_fused_equals_unfused(many, 256, 128, 256, Kind::QuickGeGLU, 7.0, 1.0);  // TMA stores, clamp and offset
  add_glu_fused_equals_unfused(skewed, 128, 128, 16, Kind::SwiGLU, 0.5, 0.0);     // row copies, clamp
  // Groups ending before the last rows (the capacity plan's layout): NaN inputs there, outputs untouched.
  const Shape3 tailed{300, 4, 8, false};
  add_gemm(tailed, 256, 192, true, DType::BF16, 77);
  add_gemm(tailed, 256, 192, false, DType::BF16, 77);
  add_gemm(tailed, 64, 40, true, DType::F32, 77);
  add_wgrad(tailed, 136, 256, 1.0f, DType::BF16, 77);
  add_wgrad(tailed, 40, 24, 0.0f, DType::F32, 77);
  add_glu(tailed, 256, 128, 0, Kind::SwiGLU, 0.0, 0.0, DType::BF16, 77);
  add_glu(tailed, 128, 64, 16, Kind::QuickGeGLU, 0.5, 1.0, DType::BF16, 77);
}

}  // namespace hytra::parity
