// Batches for training: samples [first, first + B) of a dataset, split into model inputs and
// next-token labels. Sample indices are counted in consumed samples, so a run's position in the
// data is one number (the resume point).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "data/sample_source.h"

namespace hytra {

struct Batch {
  Tensor ids;     // (B,T) int32, CPU
  Tensor labels;  // (B,T) int32, CPU; -1 = not a training target
  int64_t num_targets = 0;  // labels >= 0
};

Batch load_batch(const SampleSource& data, int64_t first_sample, int64_t batch_size);

}  // namespace hytra
