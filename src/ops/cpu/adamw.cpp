// CPU AdamW step (ops.h "optimizer"), decoupled weight decay in PyTorch/Megatron order:
//   p -= lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
//   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps).
// Element math runs in the dtype of p/m/v/g (fp32, or fp64); the scalar coefficients (lr*wd,
// 1-b1, 1-b2 and the bias corrections 1-b^step) are computed in fp64 and then cast once.
// p_copy, when defined, then receives p converted to its own dtype (e.g. the bf16 model weights).
#include <cmath>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {
namespace {

template <class T>
void adamw_impl(T* p, T* m, T* v, const T* g, int64_t n, double lr, double beta1, double beta2, double eps,
                double weight_decay, double grad_scale, int64_t step) {
  const T decay = T(lr * weight_decay), t_lr = T(lr), t_eps = T(eps);
  const T b1 = T(beta1), b2 = T(beta2), one_b1 = T(1.0 - beta1), one_b2 = T(1.0 - beta2), gs = T(grad_scale);
  const T bc1 = T(1.0 - std::pow(beta1, double(step))), bc2 = T(1.0 - std::pow(beta2, double(step)));
  parallel_for(n, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T gi = grad_scale == 1.0 ? g[i] : gs * g[i];
      T pi = p[i] - decay * p[i];
      const T mi = b1 * m[i] + one_b1 * gi;
      const T vi = b2 * v[i] + one_b2 * gi * gi;
      pi -= t_lr * (mi / bc1) / (std::sqrt(vi / bc2) + t_eps);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
    }
  });
}

}  // namespace

void adamw(Exec& ex, Tensor& p, Tensor& m, Tensor& v, const Tensor& g, Tensor& p_copy, double lr, double beta1,
           double beta2, double eps, double weight_decay, double grad_scale, int64_t step) {
  if (p.dtype() == DType::F64)
    adamw_impl(p.data<double>(), m.data<double>(), v.data<double>(), g.data<double>(), p.numel(), lr, beta1,
               beta2, eps, weight_decay, grad_scale, step);
  else
    adamw_impl(p.data<float>(), m.data<float>(), v.data<float>(), g.data<float>(), p.numel(), lr, beta1, beta2,
               eps, weight_decay, grad_scale, step);
  if (p_copy.defined()) copy(ex, p_copy, p);
}

}  // namespace hytra::cpu
