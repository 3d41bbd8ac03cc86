#include "common/compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace hytra::test {

std::string CompareResult::summary() const {
  std::ostringstream os;
  os << "max_abs=" << max_abs << " max_rel=" << max_rel << " nmse=" << nmse << " worst_index=" << worst
     << " bad=" << num_bad << (non_finite ? " NON-FINITE" : "");
  return os.str();
}

CompareResult compare(const Tensor& got, const Tensor& want, Tolerance tol) {
  CompareResult r;
  if (got.shape() != want.shape()) {
    r.num_bad = -1;
    return r;
  }
  auto g = got.to_f64_vector(), w = want.to_f64_vector();
  double err2 = 0, ref2 = 0, worst_excess = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i]) || !std::isfinite(w[i])) {
      r.non_finite = true;
      if (r.worst < 0) r.worst = int64_t(i);
      continue;
    }
    double d = std::fabs(g[i] - w[i]);
    double rel = d / std::max(std::fabs(w[i]), 1e-30);
    err2 += d * d;
    ref2 += w[i] * w[i];
    if (d > r.max_abs) r.max_abs = d;
    if (rel > r.max_rel && std::fabs(w[i]) > tol.atol) r.max_rel = rel;
    double excess = d - (tol.atol + tol.rtol * std::fabs(w[i]));
    if (excess > 0) r.num_bad++;
    if (excess > worst_excess) {
      worst_excess = excess;
      r.worst = int64_t(i);
    }
  }
  r.nmse = ref2 > 0 ? err2 / ref2 : err2;
  return r;
}

::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape mismatch: " << got.desc() << " vs " << want.desc();
  CompareResult r = compare(got, want, tol);
  if (r.non_finite || r.num_bad > 0)
    return ::testing::AssertionFailure() << r.summary() << " (rtol=" << tol.rtol << ", atol=" << tol.atol << ")";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "mismatch: " << a.desc() << " vs " << b.desc();
  Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  const auto* pa = static_cast<const unsigned char*>(ha.raw());
  const auto* pb = static_cast<const unsigned char*>(hb.raw());
  for (size_t i = 0; i < ha.nbytes(); ++i)
    if (pa[i] != pb[i])
      return ::testing::AssertionFailure() << "first differing byte " << i << " of " << a.desc();
  return ::testing::AssertionSuccess();
}

}  // namespace hytra::test
