// random_normal on the CPU: element i from core/philox.h, threaded over fixed chunks.
#include "core/philox.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {

void random_normal(Exec&, Tensor& y, uint64_t seed, uint64_t stream, double mean, double std) {
  const DType t = y.dtype();
  void* p = y.raw();
  parallel_for(y.numel(), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const double v = mean + std * double(philox_normal(seed, stream, uint64_t(i)));
      if (t == DType::F64)
        static_cast<double*>(p)[i] = v;
      else if (t == DType::F32)
        static_cast<float*>(p)[i] = float(v);
      else
        static_cast<bf16*>(p)[i] = float_to_bf16(float(v));
    }
  });
}

}  // namespace hytra::cpu
