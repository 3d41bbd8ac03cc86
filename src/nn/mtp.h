// One multi-token-prediction depth k (docs/spec/mtp.md §1): from the previous depth's final-normed hidden
// state h (depth 1: the main decoder's output after its final norm) and the token ids rolled left
// k times (0-filled tail),
//   z = eh_proj([enorm(embedding(ids_k)), hnorm(h)])      (embedding FIRST; eh_proj [C, 2C], no bias)
//   z = z + f(z) for each inner sub-layer (the MTP pattern, e.g. `*-`; plain residuals)
//   h_k = final_layernorm(z);  per-token loss = CE(output_layer(h_k), labels rolled k times).
// The embedding table and the output layer are the main model's (shared Params, own saved state).
// Keys under `mtp.layers.<k-1>.`: enorm.weight, hnorm.weight, eh_proj.weight, final_layernorm.weight,
// and the inner sub-layers under `mtp_model_layer.layers.<j>.` (the hybrid path of docs/spec/names.md §4).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/lm_head.h"
#include "nn/module.h"
#include "nn/norm.h"

namespace hytra {

class MtpDepth {
 public:
  // prefix "mtp.layers.<k-1>."; build_layers creates the inner sub-layers (registering their
  // Params after eh_proj's, in Megatron's order); embedding/output: the main model's Params.
  using LayerFactory = std::function<std::vector<std::unique_ptr<Module>>(ParamStore&)>;
  // tp: the tensor-parallel group of the shared embedding and LM head (eh_proj is held whole on every rank).
  MtpDepth(const std::string& prefix, const NormOptions& norm, double init_std, Param& embedding, Param& output,
           const LayerFactory& build_layers, ParamStore& store, const TensorParallel& tp = {});

  // h (B,T,C), ids and labels (B,T) int32 already rolled for this depth -> per-token losses (B,T);
  // h_out receives h_k (B,T,C) for the next depth.
  Tensor forward(StepContext& ctx, const Tensor& h, const Tensor& ids, const Tensor& labels, Tensor& h_out);
  // dloss (B,T) of this depth's losses and dh_out (B,T,C) from the next depth (undefined for the
  // last) -> dh (B,T,C); accumulates every parameter gradient (the shared ones included).
  Tensor backward(StepContext& ctx, const Tensor& dloss, const Tensor& dh_out);
  void backward_dw(StepContext& ctx);
  const std::vector<std::unique_ptr<Module>>& layers() const { return layers_; }

 private:
  struct Saved {
    Shape shape;  // (B,T,C)
  };
  int64_t hidden_;
  std::unique_ptr<Embedding> embedding_;
  std::unique_ptr<Norm> enorm_, hnorm_, final_norm_;
  std::unique_ptr<Linear> eh_proj_;
  std::vector<std::unique_ptr<Module>> layers_;
  std::unique_ptr<OutputLayer> output_;
};

}  // namespace hytra
