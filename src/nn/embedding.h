// Embedding: a (V, C) table looked up by int32 ids (B,T) -> (B,T,C); key given by the caller
// ("embedding.word_embeddings.weight", or the learned position table). backward accumulates the
// table gradient and returns an undefined tensor (ids have no gradient).
#pragma once
#include <string>

#include "nn/module.h"
#include "nn/param.h"

namespace hytra {

class Embedding : public Module {
 public:
  Embedding(const std::string& key, int64_t rows, int64_t dim, double init_std, ParamStore& store);
  // A second lookup of an existing table (MTP's use of the word embeddings): its own saved state.
  explicit Embedding(Param& shared) : dim_(shared.shape.at(1)), w_(&shared) {}

  Tensor forward(StepContext& ctx, const Tensor& ids) override;  // ids (B,T) int32 -> (B,T,C)
  Tensor backward(StepContext& ctx, const Tensor& dy) override;  // dy (B,T,C)

  Param& weight() { return *w_; }

 private:
  struct Saved {
    Tensor ids;  // (N) int32
  };
  int64_t dim_;
  Param* w_;
};

}  // namespace hytra
