// Module: the layer contract (docs/ARCHITECTURE.md). forward(ctx, x) saves what backward needs in the layer's
// slot of ctx and returns y; backward(ctx, dy) returns dx (overwritten) and accumulates parameter
// gradients (+=) or, with ctx.delay_wgrad, queues them for backward_dw().
// Sub-layers of the residual stream (attention, MLP, ...) compute f(h) only: the model adds the
// residual (h + f(h)), so hyper-connections can wrap f later.
#pragma once
#include "core/tensor.h"
#include "nn/context.h"

namespace hytra {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(StepContext& ctx, const Tensor& x) = 0;
  virtual Tensor backward(StepContext& ctx, const Tensor& dy) = 0;
  // Runs this layer's weight-gradient work that backward() queued under ctx.delay_wgrad (nothing
  // for layers without GEMM weights; norm weight grads are never delayed).
  virtual void backward_dw(StepContext&) {}
};

// Statistics dtype for activations of dtype t: fp64 alongside fp64 data, else fp32.
inline DType stat_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace hytra
