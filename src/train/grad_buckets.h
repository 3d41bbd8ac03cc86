// The data-parallel buckets (docs/parallelism.md): contiguous ranges of the flat gradient (and parameter)
// buffers that are reduced, sharded and gathered as units, as Megatron's DDP buckets. Built from the last
// parameter backward, the order in which the backward completes gradients: a bucket closes at the first
// parameter start that makes it hold at least `bucket_elems` elements. Buckets start at parameter starts that
// ParamStore aligned, and the last ends at the buffer's end, so with ParamStore::finalize's `align` a multiple
// of the number of ranks, every bucket divides into equal parts, one a rank. A bucket holds routed experts' weights
// under expert parallelism (Param::expert_parallel) or none: they reduce over another group.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/param.h"
#include "train/adamw.h"

namespace hytra {

struct GradBucket {
  FlatRange range;                        // of the flat buffers
  size_t first_param = 0, end_param = 0;  // its parameters: [first, end) of ParamStore::all()
  bool expert = false;                    // its parameters are expert-parallel ones
};

// In buffer order (the first bucket holds the first parameter). bucket_elems <= 0: one bucket.
std::vector<GradBucket> plan_grad_buckets(ParamStore& params, int64_t bucket_elems);

}  // namespace hytra
