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

// The sum of term(x[i]) in Acc, block by block as above.
template <class Acc, class T, class Term>
Acc blocked_sum(const T* x, int64_t n, Term term) {
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<Acc> partial(size_t(nblocks), Acc(0));
  parallel_for(nblocks, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const T* p = x + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      Acc s = 0;
      for (int64_t i = 0; i < len; ++i) s += term(to_f64(p[i]));
      partial[size_t(b)] = s;
    }
  });
  Acc total = 0;
  for (Acc s : partial) total += s;
  return total;
}

// blocked_sum over x's elements as its floating dtype.
template <class Acc, class Term>
Acc blocked_sum(const Tensor& x, Term term, const char* op) {
  switch (x.dtype()) {
    case DType::F32: return blocked_sum<Acc>(x.data<float>(), x.numel(), term);
    case DType::BF16: return blocked_sum<Acc>(x.data<bf16>(), x.numel(), term);
    case DType::F64: return blocked_sum<Acc>(x.data<double>(), x.numel(), term);
    default: HYTRA_ASSERT(false, op, " of non-floating ", dtype_name(x.dtype()));
  }
  return 0;
}

void store_total(Tensor& out, double total) {
  if (out.dtype() == DType::F64)
    out.data<double>()[0] = total;
  else
    out.data<float>()[0] = float(total);
}

}  // namespace

void count_zeros(Exec& ex, Tensor& out, const Tensor& x) {
  out.data<int64_t>()[0] = blocked_sum<int64_t>(
      x, [](double v) { return int64_t(v == 0.0); }, "count_zeros");
}

void sum(Exec& ex, Tensor& out, const Tensor& x) {
  store_total(out, blocked_sum<double>(
                       x, [](double v) { return v; }, "sum"));
}

void sum_squares(Exec& ex, Tensor& out, const Tensor& x) {
  store_total(out, blocked_sum<double>(
                       x, [](double v) { return v * v; }, "sum_squares"));
}

}  // namespace hytra::cpu
