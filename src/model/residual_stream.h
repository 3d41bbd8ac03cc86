// How sub-layer outputs join the residual stream: the policy of HybridModel's one stack loop.
//  - Plain: h = h + f(h). Each add is fused with the norm that reads the sum: the next sub-layer's
//    own input norm (PreNormModule) or the final norm (Norm::forward_add / backward_add), so the
//    stream state is (h, the pending output f). Selective recompute of a body (mlp `-`, moe `E`,
//    mamba `M`) keeps only the body's input and reruns it in backward.
//  - mHC (docs/spec/mhc.md §2 "block level"): the embedding output is replicated into n streams, each
//    sub-layer's HyperConnection mixes them (the sub-layers are wrapped), and their mean enters the
//    final norm. Selective "mhc" recompute keeps each block's input streams and rebuilds the others.
#pragma once
#include <memory>
#include <vector>

#include "model/config.h"
#include "nn/context.h"
#include "nn/module.h"
#include "nn/norm.h"

namespace hytra {

class ResidualStream {
 public:
  // A micro-batch's saved state (its StepContext slot).
  struct Saved {
    std::vector<Tensor> body_in;       // plain selective recompute: a body's input (B,T,C)
    std::vector<Tensor> mhc_block_in;  // selective "mhc": each block's input streams, at its first layer
    Tensor mhc_X;                      // (N,n,C) the last sub-layer's streams
    Tensor mhc_mean;                   // (N,n) the contraction's weights 1/n
  };
  struct State {
    Tensor h;  // plain: the stream (B,T,C); mHC: the streams (B,T,n,C)
    Tensor f;  // plain: the last sub-layer's output, not yet added (undefined before the first)
    // The slot, fetched once by enter(): a fetch inside a recompute scope would be dropped with the
    // scope's state.
    Saved* saved = nullptr;
  };

  // selective_body[i]: sub-layer i's body is recomputed (plain); mhc_block_start[i]: sub-layer i
  // starts a selective-"mhc" block (empty: no such blocks). final_norm: null on a pipeline stage before the last.
  ResidualStream(const ModelConfig& cfg, std::vector<std::unique_ptr<Module>>& sublayers, Norm* final_norm,
                 std::vector<bool> selective_body, std::vector<bool> mhc_block_start);

  State enter(StepContext& ctx, const Tensor& h);       // the embedding output (B,T,C)
  // A pipeline stage after the first: the stream state exit() gave the stage before (plain: (B,T,C); mHC: the
  // n streams (B,T,n,C)).
  State resume(StepContext& ctx, const Tensor& x);
  void step(StepContext& ctx, size_t i, State& state);  // sub-layer i
  Tensor leave(StepContext& ctx, State& state);         // the final-normed hidden state (B,T,C)
  // A pipeline stage before the last: what the next stage resumes from (plain: the stream with the pending
  // output added; mHC: the streams). Its gradient is the `d` the stage's backward starts from, and a stage
  // after the first sends back the `d` of its first sub-layer's input without leave_backward.
  Tensor exit(StepContext& ctx, State& state);

  Tensor enter_backward(StepContext& ctx, const Tensor& dy);          // from d(final-norm output)
  Tensor step_backward(StepContext& ctx, size_t i, const Tensor& d);  // through sub-layer i
  Tensor leave_backward(StepContext& ctx, const Tensor& d);           // -> d(embedding output)

 private:
  const ModelConfig& cfg_;
  std::vector<std::unique_ptr<Module>>& sublayers_;
  Norm* final_norm_;
  std::vector<bool> selective_body_, mhc_block_start_;
};

}  // namespace hytra
