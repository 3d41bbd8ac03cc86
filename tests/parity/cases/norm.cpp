// Parity cases for RMSNorm and LayerNorm, forward and backward, and the fused residual-add forms
// (add_rmsnorm_fwd, rmsnorm_bwd_add): fp32 and bf16 activations, fp32 or bf16 weights, with and
// without the LayerNorm bias, more rows than the weight-gradient kernels' row chunks, rows on the
// vector fast path (C % 8 == 0, 1 to 8 vectors per thread) and off it, in-place aliasing.
// Backward inputs (rstd, mean) come from the CPU forward, shared by both. add_rmsnorm_fwd in bf16
// runs the CPU reference on bf16 tensors, so it rounds the sum as the op defines; its "exact"
// cases check on the GPU that the fused op equals add + rmsnorm_fwd bitwise.
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

// alias: sum is a (in place). bf16: the CPU reference also works in bf16 storage.
void add_add_rms_fwd(int64_t N, int64_t C, DType dt, DType wt, bool alias) {
  register_case(make_case("add_rmsnorm_fwd", nc(N, C, wt) + (alias ? " sum=a" : ""), dt, [=](uint64_t seed) {
    Tensor a = rand({N, C}, dt, seed, -2.0, 2.0), b = rand({N, C}, dt, seed + 1, -1.0, 1.0);
    Tensor w = rand({C}, wt, seed + 2, 0.5, 1.5);
    Tensor ag = dev(a), sg = alias ? ag : dev_empty({N, C}, dt);
    Tensor yg = dev_empty({N, C}, dt), rg = dev_empty({N}, DType::F32);
    const bool lowp = dt == DType::BF16;
    Tensor ac = lowp ? as_dtype(a, dt) : ref(a), bc = lowp ? as_dtype(b, dt) : ref(b);
    Tensor sc = alias ? ac : Tensor::empty({N, C}, lowp ? dt : DType::F32);
    Tensor yc = Tensor::empty({N, C}, lowp ? dt : DType::F32), rc = cpu_empty({N});
    ops::add_rmsnorm_fwd(gpu(), sg, yg, rg, ag, dev(b), dev(w), kEps);
    ops::add_rmsnorm_fwd(cpu(), sc, yc, rc, ac, bc, ref(w), kEps);
    return std::vector<Output>{{"sum", sg, sc}, {"y", yg, yc}, {"rstd", rg, rc}};
  }));
}

// On the GPU: add_rmsnorm_fwd == add then rmsnorm_fwd, bit for bit.
void add_add_rms_fwd_exact(int64_t N, int64_t C, DType dt, DType wt, bool alias) {
  Case c = make_case("add_rmsnorm_fwd", nc(N, C, wt) + (alias ? " sum=a" : "") + " =add+rms", dt, [=](uint64_t seed) {
    Tensor a = rand({N, C}, dt, seed, -2.0, 2.0), b = rand({N, C}, dt, seed + 1, -1.0, 1.0);
    Tensor w = dev(rand({C}, wt, seed + 2, 0.5, 1.5)), bg = dev(b);
    Tensor ag = dev(a), sg = alias ? ag : dev_empty({N, C}, dt);
    Tensor yg = dev_empty({N, C}, dt), rg = dev_empty({N}, DType::F32);
    ops::add_rmsnorm_fwd(gpu(), sg, yg, rg, ag, bg, w, kEps);
    Tensor su = dev_empty({N, C}, dt), yu = dev_empty({N, C}, dt), ru = dev_empty({N}, DType::F32);
    ops::add(gpu(), su, dev(a), bg);
    ops::rmsnorm_fwd(gpu(), yu, ru, su, w, kEps);
    return std::vector<Output>{{"sum", sg, su.to(Device::CPU)}, {"y", yg, yu.to(Device::CPU)},
                               {"rstd", rg, ru.to(Device::CPU)}};
  });
  c.criterion = Criterion::Exact;
  c.tol = 0;
  register_case(c);
}

// alias: dx is dres (in place).
void add_rms_bwd_add(int64_t N, int64_t C, DType dt, DType wt, bool alias) {
  register_case(make_case("rmsnorm_bwd_add", nc(N, C, wt) + (alias ? " dx=dres" : ""), dt, [=](uint64_t seed) {
    Tensor x = rand({N, C}, dt, seed, -2.0, 2.0), w = rand({C}, wt, seed + 1, 0.5, 1.5);
    Tensor dy = rand({N, C}, dt, seed + 2), dw = rand({C}, DType::F32, seed + 3), dres = rand({N, C}, dt, seed + 4);
    Tensor y = cpu_empty({N, C}), rstd = cpu_empty({N});
    ops::rmsnorm_fwd(cpu(), y, rstd, ref(x), ref(w), kEps);
    Tensor dresg = dev(dres), dxg = alias ? dresg : dev_empty({N, C}, dt), dwg = dev(dw);
    Tensor dresc = ref(dres), dxc = alias ? dresc : cpu_empty({N, C}), dwc = ref(dw);
    ops::rmsnorm_bwd_add(gpu(), dxg, dwg, dev(dy), dev(x), dev(w), dev(rstd), dresg);
    ops::rmsnorm_bwd_add(cpu(), dxc, dwc, ref(dy), ref(x), ref(w), rstd, dresc);
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
  add_rms_fwd(8, 16384, bf16, f32);   // 8 vectors per thread
  add_rms_fwd(4, 40000, bf16, bf16);  // 8 vectors per thread, 640 threads
  add_rms_fwd(33, 257, bf16, f32);    // scalar path
  add_rms_bwd(1100, 256, bf16, f32);  // several rows per chunk
  add_rms_bwd(700, 4096, f32, bf16);
  add_add_rms_fwd(64, 1000, f32, f32, false);
  add_add_rms_fwd(37, 4096, bf16, bf16, false);
  add_add_rms_fwd(37, 768, bf16, f32, true);
  add_add_rms_fwd(33, 257, bf16, f32, false);
  add_add_rms_fwd(20, 257, f32, f32, true);
  add_add_rms_fwd_exact(64, 2048, bf16, f32, false);
  add_add_rms_fwd_exact(37, 4096, bf16, bf16, true);
  add_add_rms_fwd_exact(64, 1000, f32, f32, true);
  add_add_rms_fwd_exact(33, 257, bf16, bf16, false);
  add_rms_bwd_add(300, 257, f32, f32, false);
  add_rms_bwd_add(64, 2048, bf16, bf16, true);
  add_rms_bwd_add(1100, 2048, bf16, f32, false);
  add_rms_bwd_add(700, 1000, f32, f32, true);
  add_ln_fwd(64, 1000, f32, f32, true);
  add_ln_fwd(33, 513, f32, f32, false);
  add_ln_fwd(37, 2048, bf16, bf16, true);
  add_ln_bwd(300, 257, f32, f32, true);
  add_ln_bwd(40, 100, f32, f32, false);
  add_ln_bwd(64, 2048, bf16, bf16, true);
}

}  // namespace hytra::parity
