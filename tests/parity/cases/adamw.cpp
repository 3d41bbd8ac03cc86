// Parity cases for adamw: without a weight copy, with an fp32 copy and with a bf16 copy. The
// parameter is compared through its update (p_new - p_old, on the host in double), which a wrong
// bias correction or weight decay changes by far more than the tolerance.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

// p_new - p_old, element by element, as an fp32 host tensor.
Tensor update(const Tensor& p_new, const Tensor& p_old) {
  std::vector<double> a = p_new.to_f64_vector(), b = p_old.to_f64_vector();
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  Tensor t = Tensor::empty(p_new.shape(), DType::F32);
  t.copy_from_f64(a);
  return t;
}

void add_adamw(int64_t n, bool with_copy, DType copy_t, double grad_scale) {
  std::string shape = dims({n}) + (with_copy ? std::string(" copy=") + dtype_name(copy_t) : "") +
                      (grad_scale != 1.0 ? " clipped" : "");
  Case c = make_case("adamw", shape, with_copy ? copy_t : DType::F32, [=](uint64_t seed) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    const int64_t step = 5;
    Tensor p = rand({n}, DType::F32, seed), m = rand({n}, DType::F32, seed + 1, -0.1, 0.1);
    Tensor v = rand({n}, DType::F32, seed + 2, 0.0, 0.01), g = rand({n}, DType::F32, seed + 3);
    Tensor pg = dev(p), mg = dev(m), vg = dev(v), pc = p.clone(), mc = m.clone(), vc = v.clone();
    Tensor copy_g = with_copy ? dev_empty({n}, copy_t) : Tensor(), copy_c = with_copy ? cpu_empty({n}) : Tensor();
    ops::adamw(gpu(), pg, mg, vg, dev(g), copy_g, lr, b1, b2, eps, wd, grad_scale, step);
    ops::adamw(cpu(), pc, mc, vc, g, copy_c, lr, b1, b2, eps, wd, grad_scale, step);
    std::vector<Output> outs{{"p-p0", update(pg, p), update(pc, p)}, {"m", mg, mc}, {"v", vg, vc}};
    if (with_copy) outs.push_back({"p_copy", copy_g, copy_c});
    return outs;
  });
  c.criterion = Criterion::Elementwise;  // bf16 copy: within one bf16 rounding (2^-8 relative)
  c.tol = with_copy && copy_t == DType::BF16 ? 1e-2 : 1e-3;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(adamw) {
  add_adamw(100003, false, DType::F32, 1.0);
  add_adamw(100003, true, DType::F32, 1.0);
  add_adamw(4099, true, DType::BF16, 1.0);
  add_adamw(100003, true, DType::BF16, 0.37);
}

}  // namespace hytra::parity
