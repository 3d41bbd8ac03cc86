// AdamW on fp32 master weights (ops.h "optimizer"), 8 elements per thread in 16-byte vectors over
// the aligned part of a span (one element per thread around it), fp32 math:
//   g *= grad_scale;  p -= lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
//   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
// The coefficients (lr*wd, 1-b1, 1-b2, the bias corrections) are computed on the host in double and
// rounded once; each element operation is rounded on its own, in the CPU reference's order, so a
// parameter's update does not depend on which path (vector or one-element) it takes. p_copy, when
// defined, receives the updated p in its own dtype (the bf16 model weights).
#include <cmath>

#include <cstdint>
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVecElems = 8;  // elements per thread on the vector path: 2 x 16 B of each fp32 array

// The scalar coefficients, each computed in double on the host and rounded once (as the CPU reference).
struct AdamwHyper {
  float lr, decay, beta1, one_beta1, beta2, one_beta2, eps, bias_corr1, bias_corr2, grad_scale;
};

// The CPU reference's operations in its order, each rounded on its own (the _rn intrinsics are never
// fused into FMAs): the vector and one-element paths, and the CPU, give the same bits.
__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float g, const AdamwHyper& hp) {
  const float gi = hp.grad_scale == 1.0f ? g : __fmul_rn(hp.grad_scale, g);
  p = __fsub_rn(p, __fmul_rn(hp.decay, p));
  m = __fadd_rn(__fmul_rn(hp.beta1, m), __fmul_rn(hp.one_beta1, gi));
  v = __fadd_rn(__fmul_rn(hp.beta2, v), __fmul_rn(__fmul_rn(hp.one_beta2, gi), gi));
  const float step = __fdiv_rn(__fmul_rn(hp.lr, __fdiv_rn(m, hp.bias_corr1)),
                               __fadd_rn(__fsqrt_rn(__fdiv_rn(v, hp.bias_corr2)), hp.eps));
  p = __fsub_rn(p, step);
}

// V elements per thread and loop step (V = kVecElems: every pointer 16-byte aligned, n % V == 0; V = 1
// any). TC is the copy's element type; p_copy may be null (no copy).
template <int V, class TC>
__global__ void adamw_kernel(float* p, float* m, float* v, const float* g, TC* p_copy, AdamwHyper hp, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V; i < n;
       i += int64_t(gridDim.x) * blockDim.x * V) {
    float pv[V], mv[V], vv[V], gv[V];
    if constexpr (V == 1) {
      pv[0] = p[i], mv[0] = m[i], vv[0] = v[i], gv[0] = g[i];
    } else {
      load_n_rw<V>(p + i, pv);
      load_n_rw<V>(m + i, mv);
      load_n_rw<V>(v + i, vv);
      load_n<V>(g + i, gv);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) adamw_element(pv[k], mv[k], vv[k], gv[k], hp);
    if constexpr (V == 1) {
      p[i] = pv[0], m[i] = mv[0], v[i] = vv[0];
    } else {
      store_n<V>(p + i, pv);
      store_n<V>(m + i, mv);
      store_n<V>(v + i, vv);
    }
    if (p_copy != nullptr) store_v<V>(p_copy + i, pv);
  }
}

// A one-element head up to the first index where every pointer is 16-byte aligned (parameter spans
// start at any element of the flat buffers), 8-element vectors, then a one-element tail. Spans whose
// pointers never align together run one element per thread throughout.
template <class TC>
void launch(cudaStream_t s, float* p, float* m, float* v, const float* g, TC* p_copy, const AdamwHyper& hp,
            int64_t n) {
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  auto aligned_at = [&](int64_t i) {
    return aligned(p + i) && aligned(m + i) && aligned(v + i) && aligned(g + i) &&
           (p_copy == nullptr || aligned(p_copy + i));
  };
  auto one_by_one = [&](int64_t first, int64_t count) {
    if (count <= 0) return;
    adamw_kernel<1, TC><<<grid_for(count, kThreads), kThreads, 0, s>>>(
        p + first, m + first, v + first, g + first, p_copy == nullptr ? nullptr : p_copy + first, hp, count);
    check_launch("adamw_kernel");
  };
  int64_t head = 0;
  while (head < kVecElems && head < n && !aligned_at(head)) ++head;
  if (head == kVecElems || head >= n) {
    one_by_one(0, n);
    return;
  }
  const int64_t nv = (n - head) / kVecElems * kVecElems;
  one_by_one(0, head);
  if (nv > 0) {
    adamw_kernel<kVecElems, TC><<<grid_for(nv / kVecElems, kThreads), kThreads, 0, s>>>(
        p + head, m + head, v + head, g + head, p_copy == nullptr ? nullptr : p_copy + head, hp, nv);
    check_launch("adamw_kernel");
  }
  one_by_one(head + nv, n - head - nv);
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
                      float(lr * weight_decay),
                      float(beta1),
                      float(1.0 - beta1),
                      float(beta2),
                      float(1.0 - beta2),
                      float(eps),
                      float(1.0 - std::pow(beta1, double(step))),
                      float(1.0 - std::pow(beta2, double(step))),
                      float(grad_scale)};
  cudaStream_t s = stream_of(ex);
  float *pp = p.data<float>(), *mp = m.data<float>(), *vp = v.data<float>();
  const float* gp = g.data<float>();
  if (!p_copy.defined())
    launch<float>(s, pp, mp, vp, gp, nullptr, hp, n);
  else if (p_copy.dtype() == DType::BF16)
    launch(s, pp, mp, vp, gp, p_copy.data<__nv_bfloat16>(), hp, n);
  else
    launch(s, pp, mp, vp, gp, p_copy.data<float>(), hp, n);
}

}  // namespace hytra::cuda
