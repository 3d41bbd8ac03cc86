// Parity cases for adamw: without a weight copy, with an fp32 copy and with a bf16 copy; sizes that
// leave a tail after the 8-element vectors, and device views starting one element into their buffer
// (a parameter span at an odd offset: a one-element head until every pointer is 16-byte aligned). The
// parameter is compared through its update (p_new - p_old, on the host in double), which a wrong
// bias correction or weight decay changes by far more than the tolerance.
#include <string>

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

// The host tensor on the device as a view `offset` elements into a larger buffer.
Tensor dev_at(const Tensor& host, int64_t offset) {
  if (offset == 0) return dev(host);
  Tensor t = dev_empty({host.numel() + offset}, host.dtype()).narrow(0, offset, host.numel());
  ops::copy(gpu(), t, dev(host));
  return t;
}

void add_adamw(int64_t n, bool with_copy, DType copy_t, double grad_scale, int64_t offset = 0) {
  std::string shape = dims({n}) + (with_copy ? std::string(" copy=") + dtype_name(copy_t) : "") +
                      (grad_scale != 1.0 ? " clipped" : "") + (offset ? " offset=" + std::to_string(offset) : "");
  Case c = make_case("adamw", shape, with_copy ? copy_t : DType::F32, [=](uint64_t seed) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    const int64_t step = 5;
    Tensor p = rand({n}, DType::F32, seed), m = rand({n}, DType::F32, seed + 1, -0.1, 0.1);
    Tensor v = rand({n}, DType::F32, seed + 2, 0.0, 0.01), g = rand({n}, DType::F32, seed + 3);
    Tensor pg = dev_at(p, offset), mg = dev_at(m, offset), vg = dev_at(v, offset);
    Tensor pc = p.clone(), mc = m.clone(), vc = v.clone();
    Tensor copy_g = with_copy ? dev_empty({n + offset}, copy_t).narrow(0, offset, n) : Tensor();
    Tensor copy_c = with_copy ? cpu_empty({n}) : Tensor();
    ops::adamw(gpu(), pg, mg, vg, dev_at(g, offset), copy_g, lr, b1, b2, eps, wd, grad_scale, step);
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
  add_adamw(4099, true, DType::BF16, 0.37, 1);
}

}  // namespace hytra::parity
