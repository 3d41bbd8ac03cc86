// Tensor parallelism (docs/parallelism.md "Tensor parallelism"), as Megatron-Core's tensor_parallel layers: each
// rank of a tensor-parallel group holds a slice of every large weight and computes the matching part of each layer.
// A layer's region starts with column-parallel projections (their output features split: this rank's heads, its
// channels of an FFN or a Mamba mixer) and ends with a row-parallel projection (its input features split), whose
// partial outputs are summed over the ranks. The input of a region is whole on every rank, so the gradient flowing
// back out of its column-parallel projections is summed over the ranks too. Everything else (norms, residuals, the
// routers, mHC) is computed whole, the same on every rank.
// Sequence parallelism (--sequence-parallel): between the regions, the activations (the residual stream, its norms,
// the mHC streams) are split along the sequence instead of held whole: each rank holds tokens
// [r T/tp, (r+1) T/tp) of every sequence. A region then starts by gathering the sequence (the column-parallel
// projection's input; backward: a reduce-scatter of its gradient) and ends by reduce-scattering the row-parallel
// sums (backward: a gather). The parameters that see only this rank's tokens (norms, mHC, MTP's eh_proj) have their
// gradients summed over the ranks.
// Layers get a TensorParallel at construction (a one-rank one by default) and build their local shapes from it;
// `shard` records on each split Param which slice of the canonical tensor it holds (nn/param.h), so
// initialisation and checkpoints see the whole tensors.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "nn/param.h"

namespace hytra {

struct TensorParallel {
  dist::Communicator* comm = nullptr;  // the tensor-parallel group; null with one rank
  int size = 1, rank = 0;
  bool sequence_parallel = false;  // --sequence-parallel
  bool on() const { return size > 1; }
  bool seq() const { return size > 1 && sequence_parallel; }
  // The part of n (heads, channels, vocabulary rows) this rank holds; n divides (ModelConfig checks).
  int64_t local(int64_t n) const { return n / size; }
};

// Expert parallelism (docs/parallelism.md "Expert parallelism"): the routed experts are divided among the ranks of
// an expert-parallel group, each holding E / size of them (rank r: experts [r E/size, (r+1) E/size)); the tokens
// routed to an expert travel to its rank and back (nn/moe/expert_dispatch.h).
struct ExpertParallel {
  dist::Communicator* comm = nullptr;  // the expert-parallel group; null with one rank
  int size = 1, rank = 0;
  bool on() const { return size > 1; }
};

// Records on p (created with its local shape) that it is this rank's shard along `dim` of a whole tensor made of
// parts whose local sizes are `local_parts` (one part: the whole dim). No-op with one rank.
void shard_param(Param& p, const TensorParallel& tp, int dim, const std::vector<int64_t>& local_parts);
// Marks a parameter held whole whose gradient is a part per rank (Param::tp_partial_grad). No-op with one rank.
void partial_grad_param(Param& p, const TensorParallel& tp);
// Marks a parameter whose gradient, under sequence parallelism, comes from this rank's tokens alone.
void sequence_parallel_grad(Param& p, const TensorParallel& tp);
// t = the sum of t over the tensor-parallel ranks (in place). No-op with one rank.
void tp_all_reduce(const TensorParallel& tp, Tensor& t);

// Sequence parallelism, on (B, t, ...) activations, batch first (the sequence is dim 1):
// the ranks' sequence parts one after the other: (B, t, ...) -> (B, t x tp, ...);
Tensor seq_gather(Exec& ex, const TensorParallel& tp, const Tensor& x);
// this rank's part of the sum over the ranks: (B, T, ...) -> (B, T / tp, ...);
Tensor seq_reduce_scatter(Exec& ex, const TensorParallel& tp, const Tensor& x);
// this rank's part (no communication): (B, T, ...) -> (B, T / tp, ...).
Tensor seq_part(Exec& ex, const TensorParallel& tp, const Tensor& x);

}  // namespace hytra
