// The vocabulary-parallel helpers on the CPU (ops.h "vocabulary-parallel embedding and cross-entropy"): one pass over
// the rows each, in the compute type (fp32, fp64 for fp64 statistics).
#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {

void vocab_shard_ids(Exec&, Tensor& out, const Tensor& ids, int64_t start, int64_t count, int64_t outside) {
  const int32_t* id = ids.data<int32_t>();
  int32_t* o = out.data<int32_t>();
  for (int64_t n = 0; n < ids.numel(); ++n)
    o[n] = id[n] >= start && id[n] < start + count ? int32_t(id[n] - start) : id[n] < 0 ? -1 : int32_t(outside);
}

void ce_shard_target(Exec&, Tensor& target, const Tensor& loss, const Tensor& lse, const Tensor& shard_labels) {
  with_compute_type(loss.dtype(), [&](auto t) {
    using T = decltype(t);
    const int32_t* lab = shard_labels.data<int32_t>();
    for (int64_t n = 0; n < loss.numel(); ++n)
      target.data<T>()[n] = lab[n] >= 0 ? lse.data<T>()[n] - loss.data<T>()[n] : T(0);
  });
}

void ce_shard_combine(Exec&, Tensor& loss, Tensor& lse, const Tensor& lse_parts, const Tensor& target,
                      const Tensor& labels) {
  with_compute_type(target.dtype(), [&](auto t) {
    using T = decltype(t);
    const int64_t S = lse_parts.size(0), N = lse_parts.size(1);
    const T* parts = lse_parts.data<T>();
    for (int64_t n = 0; n < N; ++n) {
      T m = parts[n];
      for (int64_t s = 1; s < S; ++s) m = std::max(m, parts[s * N + n]);
      T sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += std::exp(parts[s * N + n] - m);
      const T l = m + std::log(sum);
      lse.data<T>()[n] = l;
      loss.data<T>()[n] = labels.data<int32_t>()[n] < 0 ? T(0) : l - target.data<T>()[n];
    }
  });
}

}  // namespace hytra::cpu
