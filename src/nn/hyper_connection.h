// mHC hyper-connection around one sub-layer (docs/spec/mhc.md §2, docs/spec/README.md decision 3): the residual stream
// is n streams X (N, n, C); per token, from the flattened streams x = vec(X),
//   proj = mapping_proj(x) (fp32) and rms = ||x|| / sqrt(nC) (ops::mhc_proj_fwd),
//   (H_pre, H_post, H_res) = coefficients(rms, proj, alpha, bias)
//   (sigmoid, 2 sigmoid, Sinkhorn; ops::mhc_coeffs_fwd), u = sum_i H_pre[i] X[i],
//   X' = H_res X + H_post F(u)   where F is the sub-layer (its own pre-norm included).
// The mapping runs in fp32 from the fp32 master of mapping_proj whatever the activation dtype.
// Keys under `<prefix><name>.` (name: self_attention_hyper_connection for `*`, mlp_hyper_connection
// for `-`/`E`, hyper_connection for `M`/`G`): mapping_proj.weight [n^2+2n, nC] (xavier-uniform),
// alpha_pre, alpha_post, alpha_res [1] (--mhc-init-gating-factor), bias [n^2+2n] (zeros).
#pragma once
#include <memory>
#include <string>

#include "nn/module.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"
#include "ops/ops.h"

namespace hytra {

struct HyperConnectionOptions {
  int64_t hidden = 0, streams = 4;  // C, n
  int64_t sinkhorn_iterations = 20;
  double init_gating = 0.01;
  ops::MhcVariant variant = ops::MhcVariant::Main;
  bool recompute_layer = false;  // selective recompute of the wrapped sub-layer (mlp, moe, mamba)
  // The mappings are held whole on every tensor-parallel rank (as Megatron); under sequence parallelism they see
  // this rank's tokens alone (nn/tensor_parallel.h).
  TensorParallel tp;
};

class HyperConnection : public Module {
 public:
  // Wraps `layer` (f(u) -> (B,T,C)); prefix "decoder.layers.<i>.<name>.".
  HyperConnection(const HyperConnectionOptions& opt, const std::string& prefix, std::unique_ptr<Module> layer,
                  ParamStore& store);

  Tensor forward(StepContext& ctx, const Tensor& X) override;    // X (B,T,n,C) -> X' (B,T,n,C)
  Tensor backward(StepContext& ctx, const Tensor& dY) override;  // dX' -> dX
  void backward_dw(StepContext& ctx) override { layer_->backward_dw(ctx); }
  // mHC recompute (docs/spec/mhc.md §6): forget the saved input streams after forward;
  // rebuild_streams(X) restores them from the recomputed input and returns this layer's output again
  // (the combine of X with the kept F, H_res, H_post: bitwise the forward's).
  void drop_streams(StepContext& ctx);
  Tensor rebuild_streams(StepContext& ctx, const Tensor& X);
  Module& layer() { return *layer_; }

 private:
  struct Saved {
    Tensor X;                   // (N,n,C) input streams
    Tensor proj;                // (N, n^2+2n) fp32
    Tensor h_pre, h_post, r;    // (N,n), (N,n), (N)
    Tensor rms;                 // (N) ||x|| / sqrt(nC) of the flattened streams
    Tensor h_res;               // (N,n,n)
    Tensor F;                   // (N,C) sub-layer output
    Tensor u;                   // (B,T,C) the sub-layer's input (recompute_layer only)
    Shape shape;                // (B,T,n,C)
  };
  HyperConnectionOptions opt_;
  std::unique_ptr<Module> layer_;
  Param* w_;
  Param* alpha_[3];
  Param* bias_;
};

}  // namespace hytra
