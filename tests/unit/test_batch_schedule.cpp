// The batch-size ramp and sample-based run lengths (train/batch_schedule.h) against sequences worked by hand from
// Megatron's RampupBatchsizeNumMicroBatchesCalculator and update_train_iters, and their flags' named errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "core/error.h"
#include "train/batch_schedule.h"

namespace hytra {
namespace {

// start 4, increment 2, 30 samples, global batch 10: 3 increments, one every 30 / 3 = 10 samples.
const BatchRampup kRamp{4, 2, 30};

TEST(BatchSchedule, RampStepsEveryShareOfItsSamples) {
  const std::vector<std::pair<int64_t, int64_t>> at = {{0, 4},  {9, 4},   {10, 6},  {19, 6},  {20, 8},
                                                       {29, 8}, {30, 10}, {31, 10}, {500, 10}};
  for (auto [consumed, batch] : at) EXPECT_EQ(global_batch_at(kRamp, 10, consumed), batch) << consumed;
  EXPECT_EQ(global_batch_at(BatchRampup{}, 10, 0), 10);  // no ramp
}

TEST(BatchSchedule, IterationsOfASampleBasedRun) {
  // The ramp's steps consume 4, 4, 4 (to 12), 6, 6 (to 24), 8 (to 32 > 30): 6 iterations, 32 samples; then
  // (100 - 32) / 10 = 6 more, the partial batch dropped.
  EXPECT_EQ(iterations_for_samples(kRamp, 10, 100), 12);
  EXPECT_EQ(iterations_for_samples(kRamp, 10, 41), 6);
  EXPECT_EQ(iterations_for_samples(kRamp, 10, 42), 7);
  EXPECT_EQ(iterations_for_samples(BatchRampup{}, 10, 109), 10);
  EXPECT_EQ(iterations_for_samples(BatchRampup{}, 10, 9), 0);
}

TEST(BatchSchedule, RampErrorsNameTheFlag) {
  auto first_error = [](const BatchRampup& r, int64_t gbs, int64_t divisor) {
    const auto errs = rampup_errors(r, gbs, divisor);
    return errs.empty() ? std::string("none") : errs[0];
  };
  EXPECT_EQ(first_error(kRamp, 10, 2), "none");
  EXPECT_NE(first_error(kRamp, 10, 4)
                .find("global batch size 6 is not a multiple of --micro-batch-size x the "
                      "data-parallel size (4)"),
            std::string::npos);
  EXPECT_NE(first_error({4, 4, 30}, 10, 2).find("must be a multiple of the increment (4)"), std::string::npos);
  EXPECT_NE(first_error({12, 2, 30}, 10, 2).find("must be below --global-batch-size (10)"), std::string::npos);
  EXPECT_NE(first_error({4, 2, 0}, 10, 2).find("expected positive ramp-up samples"), std::string::npos);
  EXPECT_NE(first_error({4, 0, 30}, 10, 2).find("expected a positive batch size increment"), std::string::npos);
}

std::string parse_error(const std::vector<std::string>& extra, TrainConfig* out = nullptr) {
  std::vector<std::string> args = {"--hybrid-layer-pattern", "*-", "--hidden-size", "32", "--num-attention-heads", "4",
                                   "--vocab-size",           "64", "--seq-length",  "8",  "--micro-batch-size",    "2",
                                   "--global-batch-size",    "10", "--mock-data"};
  args.insert(args.end(), extra.begin(), extra.end());
  ModelConfig m;
  TrainConfig t;
  try {
    parse_train_args(args, m, t, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  if (out != nullptr) *out = t;
  return "no error";
}

TEST(BatchSchedule, TrainSamplesSetsTheIterations) {
  TrainConfig t;
  ASSERT_EQ(parse_error({"--train-samples", "100", "--rampup-batch-size", "4", "2", "30"}, &t), "no error");
  EXPECT_EQ(t.train_iters, 12);
  EXPECT_EQ(t.global_batch_at(12), 6);
  EXPECT_EQ(t.num_micro_batches_at(12), 3);
  EXPECT_EQ(t.num_micro_batches(), 5);
}

TEST(BatchSchedule, SampleAndIterationFlagsDoNotMix) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--train-iters", "5", "--train-samples", "100"}, "--train-samples: cannot be combined with --train-iters"},
      {{"--train-samples", "100", "--lr-decay-iters", "5"}, "--lr-decay-iters: a sample-based run"},
      {{"--train-samples", "100", "--lr-warmup-iters", "5"}, "--lr-warmup-iters: a sample-based run"},
      {{"--train-samples", "100", "--lr-warmup-fraction", "0.1", "--lr-warmup-samples", "5"},
       "--lr-warmup-fraction: cannot be combined with --lr-warmup-samples"},
      {{"--train-iters", "5", "--lr-decay-samples", "50"}, "--lr-decay-samples: needs a sample-based run"},
      {{"--train-iters", "5", "--lr-warmup-samples", "50"}, "--lr-warmup-samples: needs a sample-based run"},
      {{"--train-iters", "5", "--lr-wsd-decay-samples", "50"}, "--lr-wsd-decay-samples: needs a sample-based run"},
      {{"--train-iters", "5", "--rampup-batch-size", "4", "2", "30"}, "--rampup-batch-size: needs a sample-based run"},
      {{"--train-samples", "100", "--rampup-batch-size", "0", "2", "30"}, "expected a positive start batch size"},
      {{"--train-samples", "100", "--rampup-batch-size", "4", "2"}, "--rampup-batch-size: expected 3 values"},
      {{"--train-samples", "100", "--rampup-batch-size", "3", "1", "30"},
       "the ramp's global batch size 3 is not a multiple of --micro-batch-size"},
      {{"--train-samples", "9"}, "--train-samples 9: fewer samples than one global batch"},
      {{"--train-samples", "-5"}, "--train-samples: expected a positive integer, got -5"},
  };
  for (const auto& [args, needle] : cases) {
    const std::string e = parse_error(args);
    EXPECT_NE(e.find(needle), std::string::npos) << args[0] << " ... gave: " << e;
  }
}

}  // namespace
}  // namespace hytra
