#include "common/finite_diff.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hytra::test {

double weighted_sum(const Tensor& y, const Tensor& r) {
  const std::vector<double> a = y.to_f64_vector(), b = r.to_f64_vector();
  HYTRA_CHECK(a.size() == b.size(), "weighted_sum: ", y.desc(), " vs ", r.desc());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> numeric_grad(const Tensor& t, const std::function<double()>& loss, double h) {
  HYTRA_CHECK(t.dtype() == DType::F64 && t.device() == Device::CPU, "numeric_grad needs a CPU fp64 tensor, got ",
              t.desc());
  double* v = t.data<double>();
  std::vector<double> grad(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double saved = v[i];
    auto at = [&](double delta) {
      v[i] = saved + delta;
      return loss();
    };
    grad[size_t(i)] = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
    v[i] = saved;
  }
  return grad;
}

::testing::AssertionResult grad_close(const std::vector<double>& analytic, const std::vector<double>& numeric,
                                      double rel_tol, double abs_tol) {
  if (analytic.size() != numeric.size())
    return ::testing::AssertionFailure() << analytic.size() << " analytic vs " << numeric.size() << " numeric values";
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i], n = numeric[i];
    const double tol = rel_tol * std::max(std::fabs(a), std::fabs(n)) + abs_tol;
    const double excess = std::isfinite(a) && std::isfinite(n) ? std::fabs(a - n) / tol : HUGE_VAL;
    if (excess <= 1.0) continue;
    if (bad++ == 0 || excess > worst_excess) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << analytic.size() << " elements off; worst [" << worst
                                       << "]: analytic " << analytic[worst] << ", numeric " << numeric[worst];
}

}  // namespace hytra::test
