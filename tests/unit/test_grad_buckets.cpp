// The data-parallel buckets (train/grad_buckets.h) and AdamW over parts of the flat buffers, the two pieces the
// distributed optimizer is built from: buckets tile the buffer at parameter starts, fill from the last
// parameter, never cut a parameter list that reads as one tensor, and divide by the ranks when ParamStore
// aligns for them; AdamW over parts updates exactly those elements, bitwise as the whole-buffer AdamW does. The
// logged statistics (--log-num-zeros-in-grad, --log-params-norm) count each parameter's elements, not the padding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/random.h"
#include "train/adamw.h"
#include "train/distributed_optimizer.h"
#include "train/grad_buckets.h"

namespace hytra {
namespace {

// Parameters of uneven sizes, one of them a per-expert list (the second expert follows the first).
void make_params(ParamStore& s) {
  s.create("a", {300}, InitKind::Normal, 0.02, false);
  s.create("b", {7, 9}, InitKind::Normal, 0.02, true);
  s.create("e0", {50}, InitKind::Normal, 0.02, false);
  s.create("e1", {50}, InitKind::Normal, 0.02, false).follows_previous = true;
  s.create("c", {1000}, InitKind::Normal, 0.02, false);
  s.create("d", {5}, InitKind::Normal, 0.02, true);
}

void expect_tiling(ParamStore& s, const std::vector<GradBucket>& buckets) {
  ASSERT_FALSE(buckets.empty());
  EXPECT_EQ(buckets.front().range.begin, 0);
  EXPECT_EQ(buckets.front().first_param, 0u);
  EXPECT_EQ(buckets.back().range.end, s.flat_grads().numel());
  EXPECT_EQ(buckets.back().end_param, s.all().size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    const GradBucket& g = buckets[b];
    EXPECT_LT(g.first_param, g.end_param);
    EXPECT_EQ(g.range.begin, s.all()[g.first_param]->offset) << "bucket " << b << " starts at its first parameter";
    EXPECT_FALSE(s.all()[g.first_param]->follows_previous) << "bucket " << b << " cuts a parameter list";
    if (b + 1 < buckets.size()) {
      EXPECT_EQ(g.range.end, buckets[b + 1].range.begin);
      EXPECT_EQ(g.end_param, buckets[b + 1].first_param);
    }
  }
}

TEST(GradBuckets, OneBucketUnlessSized) {
  ParamStore s;
  make_params(s);
  s.finalize(DType::F32, Device::CPU);
  const std::vector<GradBucket> one = plan_grad_buckets(s, 0);
  ASSERT_EQ(one.size(), 1u);
  expect_tiling(s, one);
}

TEST(GradBuckets, FillFromTheLastParameterAndNeverCutAList) {
  ParamStore s;
  make_params(s);
  s.finalize(DType::F32, Device::CPU);
  // Offsets (64-element alignment): a 0, b 320, e0 384, e1 434 (follows), c 512, d 1536; the buffer ends at 1600.
  ASSERT_EQ(s.find("c")->offset, 512);
  ASSERT_EQ(s.find("e1")->offset, 434);
  const std::vector<GradBucket> b = plan_grad_buckets(s, 100);
  expect_tiling(s, b);
  // From the end: d alone (64 elements) is short of 100, so [c, d] closes at c; then [e0 e1] (128 >= 100);
  // b (64) is short, so [a, b] closes at the first parameter.
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].range.begin, 0);
  EXPECT_EQ(b[0].range.end, 384);
  EXPECT_EQ(b[1].range.end, 512);
  EXPECT_EQ(b[2].range.end, 1600);
  // A bucket size of one element: a bucket a parameter start, the expert list still whole.
  const std::vector<GradBucket> each = plan_grad_buckets(s, 1);
  expect_tiling(s, each);
  EXPECT_EQ(each.size(), 5u);
}

TEST(GradBuckets, AlignedForTheRanksEveryBucketDivides) {
  for (int ranks : {2, 3, 4, 6}) {
    ParamStore s;
    make_params(s);
    s.finalize(DType::F32, Device::CPU, DataParallelOptimizer::param_align(ranks, true));
    for (const GradBucket& g : plan_grad_buckets(s, 1)) EXPECT_EQ(g.range.size() % ranks, 0) << ranks << " ranks";
  }
  EXPECT_EQ(DataParallelOptimizer::param_align(4, false), ParamStore::kAlign);
  EXPECT_EQ(DataParallelOptimizer::param_align(1, true), ParamStore::kAlign);
  EXPECT_EQ(DataParallelOptimizer::param_align(3, true), 3 * ParamStore::kAlign);
}

TEST(AdamW, PartsUpdateExactlyTheirElementsAsTheWholeBufferDoes) {
  auto build = [](ParamStore& s) {
    make_params(s);
    s.finalize(DType::F32, Device::CPU);
    init_params(s, 7);
    Tensor g = test::random_uniform({s.flat_grads().numel()}, DType::F32, 11);
    std::memcpy(s.flat_grads().raw(), g.raw(), g.nbytes());
  };
  ParamStore whole, parted;
  build(whole);
  build(parted);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  AdamW all(whole, cfg);
  // Parts that cut parameters and padding, and leave gaps.
  const std::vector<FlatRange> parts = {{10, 333}, {400, 450}, {900, 1600}};
  AdamW some(parted, cfg, parts);
  EXPECT_EQ(some.exp_avg_flat().numel(), 323 + 50 + 700);
  Exec& ex = Exec::for_device(Device::CPU);
  const Tensor before = parted.flat_master().clone();
  for (int step = 0; step < 3; ++step) {
    all.step(ex, 1e-2, 0.5);
    some.step(ex, 1e-2, 0.5);
  }
  const float* w = whole.flat_master().data<float>();
  const float* p = parted.flat_master().data<float>();
  const float* p0 = before.data<float>();
  size_t part = 0;
  for (int64_t i = 0; i < parted.flat_master().numel(); ++i) {
    while (part < parts.size() && i >= parts[part].end) ++part;
    const bool inside = part < parts.size() && i >= parts[part].begin;
    if (inside)
      ASSERT_EQ(p[i], w[i]) << "element " << i << " inside a part";
    else
      ASSERT_EQ(p[i], p0[i]) << "element " << i << " outside the parts changed";
  }
  // The moments of the parts, one after the other, are the whole optimizer's at those elements.
  const float* mw = all.exp_avg_flat().data<float>();
  const float* mp = some.exp_avg_flat().data<float>();
  int64_t at = 0;
  for (const FlatRange& r : parts)
    for (int64_t i = r.begin; i < r.end; ++i) ASSERT_EQ(mp[at++], mw[i]) << "moment of element " << i;
}

TEST(DataParallelOptimizer, ZerosAndParamsNormCountEachParameterOnce) {
  ParamStore s;
  make_params(s);
  s.finalize(DType::F32, Device::CPU);
  init_params(s, 5);
  // Gradients random in (0, 1) with zeros (either sign) at random elements of the parameters; the padding stays zero.
  std::mt19937 rng(3);
  int64_t zeros = 0;
  double squares = 0;
  for (Param* p : s.all()) {
    float* g = p->grad.data<float>();
    const float* w = p->master.data<float>();
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      const uint32_t r = rng();
      g[i] = r % 5 == 0 ? (r % 2 ? 0.0f : -0.0f) : 0.5f + float(r % 1000) / 2000.0f;
      zeros += r % 5 == 0;
      squares += double(w[i]) * double(w[i]);
    }
  }
  ASSERT_GT(s.flat_grads().numel(), s.num_elements()) << "the test needs padding between parameters";
  DataParallelOptimizer opt(s, AdamWConfig{}, nullptr, DataParallelOptions{});
  Exec& ex = Exec::for_device(Device::CPU);
  EXPECT_EQ(opt.grad_zeros(ex), zeros);
  EXPECT_NEAR(opt.params_norm(ex), std::sqrt(squares), 1e-6 * std::sqrt(squares));
}

}  // namespace
}  // namespace hytra
