// CPU reductions (ops.h "reductions"): sum(x) and sum(x^2) over all elements, and the count of zeros.
// Deterministic: x is cut into fixed blocks of kBlock elements; each block is summed in order in
// fp64 (one parallel_for task owns each block), and the block partials are added in block order,
// so the result does not depend on the thread count. out is fp32, or fp64 for fp64 x (count_zeros: int64).
#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kBlock = 4096;

inline double to_f64(float x) { return x; }
inline double to_f64(bf16 x) { return bf16_to_float(x); }
inline double to_f64(double x) { return x; }

template <class T>
double reduce(const T* x, int64_t n, bool squares) {
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(nblocks), 0.0);
  parallel_for(nblocks, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const T* p = x + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      double s = 0.0;
      if (squares)
        for (int64_t i = 0; i < len; ++i) s += to_f64(p[i]) * to_f64(p[i]);
      else
        for (int64_t i = 0; i < len; ++i) s += to_f64(p[i]);
      partial[size_t(b)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void reduce_into(Tensor& out, const Tensor& x, bool squares) {
  double total = 0.0;
  switch (x.dtype()) {
    case DType::F32: total = reduce(x.data<float>(), x.numel(), squares); break;
    case DType::BF16: total = reduce(x.data<bf16>(), x.numel(), squares); break;
    case DType::F64: total = reduce(x.data<double>(), x.numel(), squares); break;
    default: HYTRA_ASSERT(false, "reduction of non-floating ", dtype_name(x.dtype()));
  }
  if (out.dtype() == DType::F64)
    out.data<double>()[0] = total;
  else
    out.data<float>()[0] = float(total);
}

template <class T>
int64_t zeros(const T* x, int64_t n) {
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<int64_t> partial(size_t(nblocks), 0);
  parallel_for(nblocks, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const T* p = x + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      int64_t c = 0;
      for (int64_t i = 0; i < len; ++i) c += to_f64(p[i]) == 0.0;
      partial[size_t(b)] = c;
    }
  });
  int64_t total = 0;
  for (int64_t c : partial) total += c;
  return total;
}

}  // namespace

void count_zeros(Exec& ex, Tensor& out, const Tensor& x) {
  int64_t total = 0;
  switch (x.dtype()) {
    case DType::F32: total = zeros(x.data<float>(), x.numel()); break;
    case DType::BF16: total = zeros(x.data<bf16>(), x.numel()); break;
    case DType::F64: total = zeros(x.data<double>(), x.numel()); break;
    default: HYTRA_ASSERT(false, "count_zeros of non-floating ", dtype_name(x.dtype()));
  }
  out.data<int64_t>()[0] = total;
}

void sum(Exec& ex, Tensor& out, const Tensor& x) { reduce_into(out, x, false); }

void sum_squares(Exec& ex, Tensor& out, const Tensor& x) { reduce_into(out, x, true); }

}  // namespace hytra::cpu
