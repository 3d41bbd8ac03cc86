// Parity cases for RMSNorm and LayerNorm, forward and backward: fp32 and bf16 activations, fp32
// or bf16 weights, with and without the LayerNorm bias, and more rows than the weight-gradient
// kernels' row chunks. Backward inputs (rstd, mean) come from the CPU forward, shared by both.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

constexpr double kEps = 1e-5;

std::string nc(int64_t N, int64_t C, DType wt) { return "N=" + dims({N}) + " C=" + dims({C}) + " w=" + dtype_name(wt); }

void add_rms_fwd(int64_t N, int64_t C, DType dt, DType wt) {
  register_case(make_case("rmsnorm_fwd", nc(N, C, wt), dt, [=](uint64_t seed) {
    Tensor x = rand({N, C}, dt, seed, -2.0, 2.0), w = rand({C}, wt, seed + 1, 0.5, 1.5);
    Tensor yg = dev_empty({N, C}, dt), rg = dev_empty({N}, DType::F32);
    Tensor yc = cpu_empty({N, C}), rc = cpu_empty({N});
    ops::rmsnorm_fwd(gpu(), yg, rg, dev(x), dev(w), kEps);
    ops::rmsnorm_fwd(cpu(), yc, rc, ref(x), ref(w), kEps);
    return std::vector<Output>{{"y", yg, yc}, {"rstd", rg, rc}};
  }));
}

void add_rms_bwd(int64_t N, int64_t C, DType dt, DType wt) {
  register_case(make_case("rmsnorm_bwd", nc(N, C, wt), dt, [=](uint64_t seed) {
    Tensor x = rand({N, C}, dt, seed, -2.0, 2.0), w = rand({C}, wt, seed + 1, 0.5, 1.5);
    Tensor dy = rand({N, C}, dt, seed + 2), dw = rand({C}, DType::F32, seed + 3);
    Tensor y = cpu_empty({N, C}), rstd = cpu_empty({N});
    ops::rmsnorm_fwd(cpu(), y, rstd, ref(x), ref(w), kEps);
    Tensor dxg = dev_empty({N, C}, dt), dwg = dev(dw);
    Tensor dxc = cpu_empty({N, C}), dwc = ref(dw);
    ops::rmsnorm_bwd(gpu(), dxg, dwg, dev(dy), dev(x), dev(w), dev(rstd));
    ops::rmsnorm_bwd(cpu(), dxc, dwc, ref(dy), ref(x), ref(w), rstd);
    return std::vector<Output>{{"dx", dxg, dxc}, {"dw", dwg, dwc}};
  }));
}

void add_ln_fwd(int64_t N, int64_t C, DType dt, DType wt, bool bias) {
  register_case(make_case("layernorm_fwd", nc(N, C, wt) + (bias ? " bias" : ""), dt, [=](uint64_t seed) {
    Tensor x = rand({N, C}, dt, seed, -1.0, 3.0), w = rand({C}, wt, seed + 1, 0.5, 1.5);
    Tensor b = bias ? rand({C}, wt, seed + 2) : Tensor();
    Tensor yg = dev_empty({N, C}, dt), mg = dev_empty({N}, DType::F32), rg = dev_empty({N}, DType::F32);
    Tensor yc = cpu_empty({N, C}), mc = cpu_empty({N}), rc = cpu_empty({N});
    ops::layernorm_fwd(gpu(), yg, mg, rg, dev(x), dev(w), bias ? dev(b) : Tensor(), kEps);
    ops::layernorm_fwd(cpu(), yc, mc, rc, ref(x), ref(w), bias ? ref(b) : Tensor(), kEps);
    return std::vector<Output>{{"y", yg, yc}, {"mean", mg, mc}, {"rstd", rg, rc}};
  }));
}

void add_ln_bwd(int64_t N, int64_t C, DType dt, DType wt, bool bias) {
  register_case(make_case("layernorm_bwd", nc(N, C, wt) + (bias ? " db" : ""), dt, [=](uint64_t seed) {
    Tensor x = rand({N, C}, dt, seed, -1.0, 3.0), w = rand({C}, wt, seed + 1, 0.5, 1.5);
    Tensor dy = rand({N, C}, dt, seed + 2), dw = rand({C}, DType::F32, seed + 3), db = rand({C}, DType::F32, seed + 4);
    Tensor y = cpu_empty({N, C}), mean = cpu_empty({N}), rstd = cpu_empty({N});
    ops::layernorm_fwd(cpu(), y, mean, rstd, ref(x), ref(w), Tensor(), kEps);
    Tensor dxg = dev_empty({N, C}, dt), dwg = dev(dw), dbg = bias ? dev(db) : Tensor();
    Tensor dxc = cpu_empty({N, C}), dwc = ref(dw), dbc = bias ? ref(db) : Tensor();
    ops::layernorm_bwd(gpu(), dxg, dwg, dbg, dev(dy), dev(x), dev(w), dev(mean), dev(rstd));
    ops::layernorm_bwd(cpu(), dxc, dwc, dbc, ref(dy), ref(x), ref(w), mean, rstd);
    std::vector<Output> outs{{"dx", dxg, dxc}, {"dw", dwg, dwc}};
    if (bias) outs.push_back({"db", dbg, dbc});
    return outs;
  }));
}

}  // namespace

HYTRA_PARITY_CASES(norm) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  add_rms_fwd(64, 1000, f32, f32);
  add_rms_fwd(37, 4096, bf16, bf16);
  add_rms_fwd(37, 768, bf16, f32);
  add_rms_bwd(300, 257, f32, f32);
  add_rms_bwd(64, 2048, bf16, bf16);
  add_ln_fwd(64, 1000, f32, f32, true);
  add_ln_fwd(33, 513, f32, f32, false);
  add_ln_fwd(37, 2048, bf16, bf16, true);
  add_ln_bwd(300, 257, f32, f32, true);
  add_ln_bwd(40, 100, f32, f32, false);
  add_ln_bwd(64, 2048, bf16, bf16, true);
}

}  // namespace hytra::parity
