// OutputLayer: the LM head and vocabulary cross-entropy in one step (ops::lm_head_ce_*, which never
// stores the full logits). Weight `output_layer.weight` (V, C), or the word-embedding Param when tied
// (then no output_layer key exists and the gradient lands in the embedding's).
// Vocabulary-parallel (tensor parallelism, nn/tensor_parallel.h): each rank holds rows [r V/tp, (r+1) V/tp) of the
// weight and computes their logits alone; the log-sum-exp over the whole vocabulary comes from the ranks' (gathered,
// then combined in rank order) and the label's logit from the rank holding it (a sum), so no rank holds the whole
// logits. Then the gradients come from a backward pass (no fused forward-backward), and dh is summed over the ranks.
// Under sequence parallelism the head first gathers the sequence (h is this rank's tokens) and dh is
// reduce-scattered back to them.
#pragma once
#include <string>

#include "nn/context.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"

namespace hytra {

class OutputLayer {
 public:
  // tied: the embedding's Param, or null for an own weight.
  // vocab: the whole vocabulary (this rank holds tp.local(vocab) rows of the weight).
  OutputLayer(const std::string& key, int64_t vocab, int64_t hidden, double init_std, Param* tied, ParamStore& store,
              const TensorParallel& tp = {});

  // Per-token losses (B,T) for hidden (B,T,C) and labels (B,T) int32 (label < 0: loss 0). With
  // `dloss` (B,T) defined — the gradient the backward will bring, known up front in training — the
  // gradients are computed here from the same logits (ops::lm_head_ce_fwd_bwd: no logits recompute):
  // the weight gradient is accumulated now and dh kept for backward.
  Tensor forward(StepContext& ctx, const Tensor& h, const Tensor& labels, const Tensor& dloss = Tensor());
  // dh (B,T,C) for dloss (B,T); accumulates the weight gradient (unless forward did; dloss must then
  // be the tensor forward was given).
  Tensor backward(StepContext& ctx, const Tensor& dloss);

  Param& weight() { return *w_; }

  static constexpr int64_t kVocabChunk = 8192;  // bench/NOTES.md: 8192 beat 4096 on the H100 (N 8192, V 50304)
  // The fused path's logits scratch holds at most this many elements (0.5 GiB in bf16): the rows are
  // split into equal token chunks below it (N 8192, V 50304: two chunks of 4096).
  static constexpr int64_t kLogitsElements = int64_t(1) << 28;

 private:
  struct Saved {
    Tensor h;       // (N, C)
    Tensor labels;  // (N)
    Tensor lse;     // (N)
    Tensor dloss;   // (N), when forward computed the gradients
    Tensor dh;      // (N, C), likewise
  };
  int64_t hidden_;
  TensorParallel tp_;
  Param* w_;
};

}  // namespace hytra
