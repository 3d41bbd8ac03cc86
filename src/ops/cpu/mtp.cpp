// mtp_shift on the CPU: the roll, then the target count, then the loss gradient (ops.def).
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {

void mtp_shift(Exec&, Tensor& ids_next, Tensor& labels_next, Tensor& dloss, Tensor& targets, const Tensor& ids,
               const Tensor& labels, double scale, double grad_scale) {
  const int64_t B = ids.size(0), T = ids.size(1);
  const int32_t* id = ids.data<int32_t>();
  const int32_t* lab = labels.data<int32_t>();
  int32_t* id_next = ids_next.data<int32_t>();
  int32_t* lab_next = labels_next.data<int32_t>();
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t;
      const bool last = t + 1 == T;
      id_next[i] = last ? 0 : id[i + 1];
      lab_next[i] = last ? -1 : lab[i + 1];
      n += lab_next[i] >= 0;
    }
  const double w = scale / double(std::max<int64_t>(n, 1)) * grad_scale;
  std::vector<double> d(size_t(B * T));
  for (int64_t i = 0; i < B * T; ++i) d[size_t(i)] = lab_next[i] >= 0 ? w : 0.0;
  dloss.copy_from_f64(d);
  targets.copy_from_f64({double(n)});
}

}  // namespace hytra::cpu
