// AdamW on fp32 master weights (ops.h "optimizer"), one thread per element, fp32 math:
//   g *= grad_scale;  p -= lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
//   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
// The bias corrections are computed once on the host in double. p_copy, when defined, receives
// the updated p in its own dtype (the bf16 model weights).
#include <cmath>

#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamwHyper {
  float lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale;
};

__global__ void adamw_kernel(float* p, float* m, float* v, const float* g, void* p_copy, DType copy_t, AdamwHyper hp,
                             int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float pi = p[i];
    const float gi = hp.grad_scale == 1.0f ? g[i] : hp.grad_scale * g[i];
    pi -= hp.lr * hp.weight_decay * pi;
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * gi;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * gi * gi;
    pi -= hp.lr * (mi / hp.bias_corr1) / (sqrtf(vi / hp.bias_corr2) + hp.eps);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p_copy != nullptr) store_f(p_copy, copy_t, i, pi);
  }
}

}  // namespace

void adamw(Exec& ex, Tensor& p, Tensor& m, Tensor& v, const Tensor& g, Tensor& p_copy, double lr, double beta1,
           double beta2, double eps, double weight_decay, double grad_scale, int64_t step) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&p, &m, &v, &g})
    HYTRA_CHECK(t->dtype() == DType::F32, "adamw on CUDA: state must be fp32, got ", t->desc());
  if (p_copy.defined())
    HYTRA_CHECK(p_copy.dtype() == DType::F32 || p_copy.dtype() == DType::BF16,
                "adamw on CUDA: p_copy must be fp32 or bf16, got ", p_copy.desc());
  const int64_t n = p.numel();
  if (n == 0) return;
  const AdamwHyper hp{float(lr),
                      float(beta1),
                      float(beta2),
                      float(eps),
                      float(weight_decay),
                      float(1.0 - std::pow(beta1, double(step))),
                      float(1.0 - std::pow(beta2, double(step))),
                      float(grad_scale)};
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ex)>>>(
      p.data<float>(), m.data<float>(), v.data<float>(), g.data<float>(), p_copy.defined() ? p_copy.raw() : nullptr,
      p_copy.defined() ? p_copy.dtype() : DType::F32, hp, n);
  check_launch("adamw_kernel");
}

}  // namespace hytra::cuda
