// The gradient-check harness itself: it must accept a correct layer and report a wrong input
// gradient or a wrong parameter gradient (a check that cannot fail checks nothing).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "common/random.h"
#include "nn/linear.h"
#include "ops/ops.h"

namespace hytra {
namespace {

struct Fixture {
  ParamStore store;
  Linear lin{"p.linear.", 5, 3, true, 0.5, store};
  Tensor x;
  Fixture() {
    store.finalize(DType::F64, Device::CPU);
    init_params(store, test::test_seed(90));
    x = test::random_uniform({2, 4, 5}, DType::F64, 91);
  }
  test::ForwardFn forward() {
    return [this](StepContext& ctx, const Tensor& in) { return lin.forward(ctx, in); };
  }
};

TEST(GradcheckHarness, AcceptsACorrectLayer) {
  Fixture f;
  test::gradcheck(f.store, f.x, f.forward(), [&](StepContext& ctx, const Tensor& dy) { return f.lin.backward(ctx, dy); });
}

TEST(GradcheckHarness, ReportsAWrongInputGradient) {
  Fixture f;
  auto backward = [&](StepContext& ctx, const Tensor& dy) {
    Tensor dx = f.lin.backward(ctx, dy);
    ops::scale(ctx.ex(), dx, 1.0 + 1e-4);
    return dx;
  };
  EXPECT_NONFATAL_FAILURE(test::gradcheck(f.store, f.x, f.forward(), backward), "input[");
}

TEST(GradcheckHarness, ReportsAWrongParameterGradient) {
  Fixture f;
  auto backward = [&](StepContext& ctx, const Tensor& dy) {
    Tensor dx = f.lin.backward(ctx, dy);
    f.store.find("p.linear.bias")->grad.data<double>()[2] += 1e-4;
    return dx;
  };
  EXPECT_NONFATAL_FAILURE(test::gradcheck(f.store, f.x, f.forward(), backward), "p.linear.bias[2]");
}

}  // namespace
}  // namespace hytra
