#include "data/loader.h"

namespace hytra {

Batch load_batch(const SampleSource& data, int64_t first_sample, int64_t batch_size) {
  Batch b;
  std::vector<int32_t> first = data.sample(first_sample);
  const int64_t T = int64_t(first.size()) - 1;
  b.ids = Tensor::empty({batch_size, T}, DType::I32);
  b.labels = Tensor::empty({batch_size, T}, DType::I32);
  for (int64_t i = 0; i < batch_size; ++i) {
    std::vector<int32_t> s = i == 0 ? first : data.sample(first_sample + i);
    for (int64_t t = 0; t < T; ++t) {
      b.ids.data<int32_t>()[i * T + t] = s[size_t(t)];
      b.labels.data<int32_t>()[i * T + t] = s[size_t(t + 1)];
    }
  }
  b.num_targets = batch_size * T;
  return b;
}

}  // namespace hytra
