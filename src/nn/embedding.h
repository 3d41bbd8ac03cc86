// Embedding: a (V, C) table looked up by int32 ids (B,T) -> (B,T,C); key given by the caller
// ("embedding.word_embeddings.weight", or the learned position table). backward accumulates the
// table gradient and returns an undefined tensor (ids have no gradient).
// Vocabulary-parallel (tensor parallelism, nn/tensor_parallel.h): each rank holds rows [r V/tp, (r+1) V/tp), looks up
// the ids inside them (zero rows for the others), and the lookups are summed over the ranks (under sequence
// parallelism: reduce-scattered, each rank keeping its tokens; the backward gathers the sequence's gradient).
#pragma once
#include <string>

#include "nn/module.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"

namespace hytra {

class Embedding : public Module {
 public:
  // rows: the whole table's (this rank holds tp.local(rows) of them).
  Embedding(const std::string& key, int64_t rows, int64_t dim, double init_std, ParamStore& store,
            const TensorParallel& tp = {});
  // A second lookup of an existing table (MTP's use of the word embeddings): its own saved state.
  Embedding(Param& shared, const TensorParallel& tp) : dim_(shared.shape.at(1)), tp_(tp), w_(&shared) {}

  Tensor forward(StepContext& ctx, const Tensor& ids) override;  // ids (B,T) int32 -> (B,T,C)
  Tensor backward(StepContext& ctx, const Tensor& dy) override;  // dy (B,T,C)

  Param& weight() { return *w_; }

 private:
  struct Saved {
    Tensor ids;  // (N) int32
  };
  int64_t dim_;
  TensorParallel tp_;
  Param* w_;
};

}  // namespace hytra
