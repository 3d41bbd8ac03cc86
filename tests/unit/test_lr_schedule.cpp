// LR schedule vs values derived by hand from Megatron's get_lr formulas (lr_schedule.h).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/lr_schedule.h"

namespace hytra {
namespace {

constexpr double kTol = 1e-12;

// max 1.0, min 0.1, warmup 10 steps from 0.0, decay horizon 110 steps: r = (s - 10) / 100.
LrScheduleConfig base(LrDecayStyle style) {
  LrScheduleConfig c;
  c.max_lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_init = 0.0;
  c.warmup_steps = 10;
  c.decay_steps = 110;
  c.decay_style = style;
  return c;
}

TEST(LrSchedule, WarmupIsLinearFromInitAndStepZeroIsInit) {
  LrScheduleConfig c = base(LrDecayStyle::Cosine);
  c.warmup_init = 0.2;
  EXPECT_EQ(lr_at(c, 0), 0.2);           // iteration 1 trains at the init lr
  EXPECT_NEAR(lr_at(c, 5), 0.6, kTol);   // 0.2 + 0.8 * 5/10
  EXPECT_NEAR(lr_at(c, 1), 0.28, kTol);  // 0.2 + 0.8 * 1/10
  EXPECT_NEAR(lr_at(c, 10), 1.0, kTol);  // warmup end is inclusive
  c.warmup_steps = 2.5;                  // fractional (--lr-warmup-fraction)
  EXPECT_NEAR(lr_at(c, 2), 0.84, kTol);  // 0.2 + 0.8 * 2/2.5
}

TEST(LrSchedule, NoWarmupStartsAtMax) {
  LrScheduleConfig c = base(LrDecayStyle::Linear);
  c.warmup_steps = 0;
  c.decay_steps = 100;
  EXPECT_EQ(lr_at(c, 0), 1.0);
  EXPECT_NEAR(lr_at(c, 25), 0.775, kTol);  // 0.1 + 0.9 * 0.75
}

TEST(LrSchedule, Constant) {
  LrScheduleConfig c = base(LrDecayStyle::Constant);
  EXPECT_NEAR(lr_at(c, 3), 0.3, kTol);
  EXPECT_EQ(lr_at(c, 11), 1.0);
  EXPECT_EQ(lr_at(c, 110), 1.0);
  EXPECT_EQ(lr_at(c, 5000), 1.0);  // constant ignores the decay horizon and min_lr
}

TEST(LrSchedule, Linear) {
  LrScheduleConfig c = base(LrDecayStyle::Linear);
  EXPECT_NEAR(lr_at(c, 11), 0.991, kTol);  // 0.1 + 0.9 * 0.99
  EXPECT_NEAR(lr_at(c, 60), 0.55, kTol);   // r = 0.5
  EXPECT_NEAR(lr_at(c, 85), 0.325, kTol);  // r = 0.75
  EXPECT_NEAR(lr_at(c, 110), 0.1, kTol);   // r = 1
  EXPECT_EQ(lr_at(c, 111), 0.1);           // after the horizon: min_lr exactly
  EXPECT_EQ(lr_at(c, 100000), 0.1);
}

TEST(LrSchedule, Cosine) {
  LrScheduleConfig c = base(LrDecayStyle::Cosine);
  EXPECT_NEAR(lr_at(c, 35), 0.868198051533946, kTol);  // r=1/4: 0.1 + 0.9 * (0.5 + sqrt(2)/4)
  EXPECT_NEAR(lr_at(c, 60), 0.55, kTol);               // r=1/2: coeff 0.5
  EXPECT_NEAR(lr_at(c, 85), 0.231801948466054, kTol);  // r=3/4: 0.1 + 0.9 * (0.5 - sqrt(2)/4)
  EXPECT_NEAR(lr_at(c, 110), 0.1, kTol);
  EXPECT_EQ(lr_at(c, 111), 0.1);
}

TEST(LrSchedule, InverseSquareRoot) {
  LrScheduleConfig c = base(LrDecayStyle::InverseSquareRoot);
  c.warmup_steps = 4;
  c.decay_steps = 100;
  EXPECT_NEAR(lr_at(c, 2), 0.5, kTol);    // warmup 0 -> 1
  EXPECT_NEAR(lr_at(c, 16), 0.5, kTol);   // sqrt(4)/sqrt(16)
  EXPECT_NEAR(lr_at(c, 25), 0.4, kTol);   // 2/5
  EXPECT_NEAR(lr_at(c, 100), 0.2, kTol);  // 2/10
  EXPECT_EQ(lr_at(c, 101), 0.1);          // past the horizon
  c.min_lr = 0.3;
  EXPECT_EQ(lr_at(c, 64), 0.3);  // 2/8 = 0.25 clamped up to min
  c.warmup_steps = 0;            // warmup clamped to 1 step, step 0 to 1
  c.min_lr = 0.0;
  EXPECT_EQ(lr_at(c, 0), 1.0);
  EXPECT_NEAR(lr_at(c, 4), 0.5, kTol);
}

// WSD: horizon 100, warmup 10, anneal over the last 20 steps (start 80); q = (s - 80) / 20.
LrScheduleConfig wsd(WsdDecayStyle style) {
  LrScheduleConfig c = base(LrDecayStyle::WSD);
  c.decay_steps = 100;
  c.wsd_decay_steps = 20;
  c.wsd_decay_style = style;
  return c;
}

TEST(LrSchedule, WsdStableThenAnneal) {
  for (WsdDecayStyle s :
       {WsdDecayStyle::Exponential, WsdDecayStyle::Linear, WsdDecayStyle::Cosine, WsdDecayStyle::MinusSqrt}) {
    LrScheduleConfig c = wsd(s);
    EXPECT_NEAR(lr_at(c, 5), 0.5, kTol) << name_of(s);
    EXPECT_EQ(lr_at(c, 11), 1.0) << name_of(s);  // stable phase
    EXPECT_EQ(lr_at(c, 80), 1.0) << name_of(s);  // anneal start is still stable
    EXPECT_NEAR(lr_at(c, 100), 0.1, kTol) << name_of(s);
    EXPECT_EQ(lr_at(c, 101), 0.1) << name_of(s);
  }
  // q = 1/2 and q = 3/4:
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::Exponential), 90), 0.472792206135786, kTol);  // 2*2^-0.5 - 1
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::Exponential), 95), 0.270286403502449, kTol);  // 2*2^-0.75 - 1
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::Linear), 90), 0.55, kTol);
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::Linear), 95), 0.325, kTol);
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::Cosine), 90), 0.55, kTol);
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::Cosine), 95), 0.231801948466054, kTol);     // 0.5 - sqrt(2)/4
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::MinusSqrt), 90), 0.363603896932107, kTol);  // 1 - sqrt(1/2)
  EXPECT_NEAR(lr_at(wsd(WsdDecayStyle::MinusSqrt), 95), 0.220577136594005, kTol);  // 1 - sqrt(3)/2
}

// Megatron counts samples; at a constant global batch the rates agree to rounding in warmup and
// bit for bit afterwards (the decay ratios are quotients of exact integers).
TEST(LrSchedule, StepsEqualSamplesAtConstantBatch) {
  const int64_t gbs = 48;
  for (LrDecayStyle style : {LrDecayStyle::Linear, LrDecayStyle::Cosine, LrDecayStyle::WSD}) {
    LrScheduleConfig steps = base(style);
    steps.max_lr = 3e-4;
    steps.min_lr = 3e-5;
    steps.warmup_init = 1e-6;
    steps.wsd_decay_steps = 30;
    LrScheduleConfig samples = steps;
    samples.warmup_steps *= gbs;
    samples.decay_steps *= gbs;
    samples.wsd_decay_steps *= gbs;
    for (int64_t i = 0; i <= 10; ++i)
      EXPECT_NEAR(lr_at(steps, i), lr_at(samples, i * gbs), 1e-15 * lr_at(steps, i)) << i;
    for (int64_t i = 11; i <= 120; ++i) EXPECT_EQ(lr_at(steps, i), lr_at(samples, i * gbs)) << i;
  }
}

TEST(LrSchedule, ParseNamesAndErrors) {
  EXPECT_EQ(enum_of<LrDecayStyle>("inverse-square-root", "--lr-decay-style"), LrDecayStyle::InverseSquareRoot);
  EXPECT_EQ(enum_of<LrDecayStyle>("WSD", "--lr-decay-style"), LrDecayStyle::WSD);
  EXPECT_EQ(enum_of<WsdDecayStyle>("minus_sqrt", "--lr-wsd-decay-style"), WsdDecayStyle::MinusSqrt);
  EXPECT_STREQ(name_of(LrDecayStyle::Cosine), "cosine");
  try {
    enum_of<LrDecayStyle>("wsd", "--lr-decay-style");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "--lr-decay-style: expected one of constant, linear, cosine, inverse-square-root, WSD, got 'wsd'");
  }
  try {
    enum_of<WsdDecayStyle>("sqrt", "--lr-wsd-decay-style");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--lr-wsd-decay-style: expected one of exponential, linear, cosine, minus_sqrt, got 'sqrt'");
  }
}

TEST(LrSchedule, ValidationNamesEveryViolation) {
  EXPECT_TRUE(lr_schedule_errors(base(LrDecayStyle::Linear)).empty());
  EXPECT_NO_THROW(validate(wsd(WsdDecayStyle::Linear)));
  LrScheduleConfig c = base(LrDecayStyle::WSD);
  c.min_lr = -1.0;
  c.warmup_init = 2.0;
  c.warmup_steps = 110;
  c.wsd_decay_steps = 0;
  auto errs = lr_schedule_errors(c);
  ASSERT_EQ(errs.size(), 4u);
  EXPECT_EQ(errs[0], "--min-lr: expected >= 0, got -1");
  EXPECT_EQ(errs[1], "--lr-warmup-init: expected <= --lr (1), got 2");
  EXPECT_EQ(errs[2], "--lr-warmup-iters: expected < --lr-decay-iters (110), got 110");
  EXPECT_EQ(errs[3],
            "--lr-wsd-decay-iters: expected 1..--lr-decay-iters (110) with --lr-decay-style WSD, got 0");
  EXPECT_THROW(validate(c), Error);
  LrScheduleConfig d = base(LrDecayStyle::Linear);
  d.max_lr = 0.05;
  d.warmup_init = 0.0;
  d.decay_steps = 0;
  d.warmup_steps = 0;
  errs = lr_schedule_errors(d);
  ASSERT_EQ(errs.size(), 3u);
  EXPECT_EQ(errs[0], "--lr: expected >= --min-lr (0.1), got 0.05");
  EXPECT_EQ(errs[1], "--lr-decay-iters: expected > 0, got 0");
  EXPECT_EQ(errs[2], "--lr-warmup-iters: expected < --lr-decay-iters (0), got 0");
}

}  // namespace
}  // namespace hytra
