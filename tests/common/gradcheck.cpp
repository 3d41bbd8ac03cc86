#include "common/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/random.h"

namespace hytra::test {
namespace {

double dot(const Tensor& y, const Tensor& r) {
  auto a = y.to_f64_vector(), b = r.to_f64_vector();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Element indices to check: all of a small tensor, else an evenly spread fixed sample (first and last included).
std::vector<int64_t> sample(int64_t n, int64_t max_samples) {
  std::vector<int64_t> idx;
  if (n <= max_samples) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t k = 0; k < max_samples; ++k) idx.push_back(k * (n - 1) / (max_samples - 1));
  }
  return idx;
}

}  // namespace

void gradcheck(ParamStore& store, const Tensor& x, const ForwardFn& forward, const BackwardFn& backward,
               const GradcheckOptions& opt) {
  StepContext ctx(Exec::cpu());
  auto loss = [&](const Tensor& r) {
    ctx.clear();
    return dot(forward(ctx, x), r);
  };
  ctx.clear();
  Tensor y = forward(ctx, x);
  Tensor r = random_uniform(y.shape(), DType::F64, opt.seed + 1000, -1.0, 1.0);

  // Analytic pass.
  store.zero_grad();
  ctx.clear();
  forward(ctx, x);
  ctx.delay_wgrad = opt.delay_wgrad;
  Tensor dx = backward(ctx, r);
  if (opt.delay_wgrad) {
    EXPECT_GT(ctx.pending_wgrad(), 0u) << "delayed wgrad queued nothing";
    ctx.run_wgrad();
  }
  ctx.delay_wgrad = false;

  // One report per tensor: how many checked elements are off, and the worst one.
  auto check_tensor = [&](const std::string& name, const Tensor& value, const std::vector<double>& analytic) {
    double* v = value.data<double>();
    const std::vector<int64_t> idx = sample(value.numel(), opt.max_samples);
    int64_t bad = 0, worst = -1;
    double worst_excess = 0, worst_a = 0, worst_num = 0;
    for (int64_t i : idx) {
      const double saved = v[i], h = opt.step;
      auto at = [&](double delta) {
        v[i] = saved + delta;
        return loss(r);
      };
      const double num = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h), a = analytic[size_t(i)];
      v[i] = saved;
      const double tol = opt.rel_tol * std::max(std::fabs(a), std::fabs(num)) + opt.abs_tol;
      const bool finite = std::isfinite(a) && std::isfinite(num);
      const double excess = finite ? std::fabs(a - num) / tol : HUGE_VAL;
      if (excess <= 1.0) continue;
      ++bad;
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
        worst_a = a;
        worst_num = num;
      }
    }
    if (bad > 0)
      ADD_FAILURE() << name << ": " << bad << " of " << idx.size() << " checked elements off; worst " << name << "["
                    << worst << "]: analytic " << worst_a << " numeric " << worst_num << " (|diff| = "
                    << std::fabs(worst_a - worst_num) << ", " << worst_excess << "x the tolerance)";
  };
  for (Param* p : store.all()) {
    ASSERT_EQ(p->value.dtype(), DType::F64) << "gradcheck needs fp64 parameters";
    check_tensor(p->name, p->value, p->grad.to_f64_vector());
  }
  if (x.defined() && x.dtype() == DType::F64) {
    ASSERT_TRUE(dx.defined()) << "backward returned no input gradient";
    check_tensor("input", x, dx.to_f64_vector());
  }
}

void gradcheck(ParamStore& store, const Tensor& x, Module& m, const GradcheckOptions& opt) {
  gradcheck(
      store, x, [&](StepContext& ctx, const Tensor& in) { return m.forward(ctx, in); },
      [&](StepContext& ctx, const Tensor& dy) { return m.backward(ctx, dy); }, opt);
}

}  // namespace hytra::test
