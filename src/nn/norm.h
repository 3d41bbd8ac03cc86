// Norm: RMSNorm (y = x / rms(x) * w) or LayerNorm (y = (x - mean) / std * w + b) over the last dim.
// Keys `<prefix><stem>weight` (+ `<prefix><stem>bias` for LayerNorm): stem "" for a standalone norm
// ("decoder.final_norm.weight"), "layer_norm_" where Megatron fuses the norm into the next GEMM
// ("...self_attention.linear_qkv.layer_norm_weight", docs/spec/names.md §1).
#pragma once
#include <string>

#include "nn/module.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"

namespace hytra {

enum class NormKind { RMSNorm, LayerNorm };

struct NormOptions {
  NormKind kind = NormKind::RMSNorm;
  int64_t dim = 0;    // normalised width (C, or D for q/k norms)
  double eps = 1e-5;  // --norm-epsilon
};

class Norm : public Module {
 public:
  Norm(const NormOptions& opt, const std::string& prefix, ParamStore& store, const std::string& stem = "");

  Tensor forward(StepContext& ctx, const Tensor& x) override;    // x (..., dim)
  Tensor backward(StepContext& ctx, const Tensor& dy) override;
  // The residual add fused in: sum = a + b (written), y = norm(sum) returned; backward of it is
  // backward_add. One kernel each way for RMSNorm (ops::add_rmsnorm_fwd, ops::rmsnorm_bwd_add).
  Tensor forward_add(StepContext& ctx, const Tensor& a, const Tensor& b, Tensor& sum);
  // dsum = dres + (dL/dsum through the norm, from dy): the residual stream's gradient.
  Tensor backward_add(StepContext& ctx, const Tensor& dy, const Tensor& dres);
  // The last forward's output again, (N, dim), from the saved input (selective "layernorm"
  // recompute): the same op on the same input, so the same bits (add_rmsnorm_fwd equals add then
  // rmsnorm_fwd bitwise).
  Tensor recompute_output(StepContext& ctx);
  // A norm whose input rows are split over the tensor-parallel ranks (heads): its gradients are summed over them.
  void partial_grads(const TensorParallel& tp) {
    partial_grad_param(*w_, tp);
    if (b_) partial_grad_param(*b_, tp);
  }
  // A norm of the residual stream: under sequence parallelism it sees this rank's tokens alone.
  void sequence_parallel_grads(const TensorParallel& tp) {
    sequence_parallel_grad(*w_, tp);
    if (b_) sequence_parallel_grad(*b_, tp);
  }

 private:
  struct Saved {
    Tensor x;     // (N, dim)
    Tensor mean;  // (N) LayerNorm only
    Tensor rstd;  // (N)
  };
  NormOptions opt_;
  Param* w_;
  Param* b_ = nullptr;
};

}  // namespace hytra
