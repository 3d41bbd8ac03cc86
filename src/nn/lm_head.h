// OutputLayer: the LM head and vocabulary cross-entropy in one step (ops::lm_head_ce_*, which never
// stores the full logits). Weight `output_layer.weight` (V, C), or the word-embedding Param when tied
// (then no output_layer key exists and the gradient lands in the embedding's).
#pragma once
#include <string>

#include "nn/param.h"
#include "nn/context.h"

namespace hytra {

class OutputLayer {
 public:
  // tied: the embedding's Param, or null for an own weight.
  OutputLayer(const std::string& key, int64_t vocab, int64_t hidden, double init_std, Param* tied, ParamStore& store);

  // Per-token losses (B,T) for hidden (B,T,C) and labels (B,T) int32 (label < 0: loss 0).
  Tensor forward(StepContext& ctx, const Tensor& h, const Tensor& labels);
  // dh (B,T,C) for dloss (B,T); accumulates the weight gradient.
  Tensor backward(StepContext& ctx, const Tensor& dloss);

  Param& weight() { return *w_; }

  static constexpr int64_t kVocabChunk = 8192;  // bench/NOTES.md: 8192 beat 4096 on the H100 (N 8192, V 50304)

 private:
  struct Saved {
    Tensor h;       // (N, C)
    Tensor labels;  // (N)
    Tensor lse;     // (N)
  };
  int64_t hidden_;
  Param* w_;
};

}  // namespace hytra
