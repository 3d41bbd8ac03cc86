// Sample-based runs (--train-samples, --lr-*-samples) and the batch-size ramp (--rampup-batch-size) on the CPU:
// a sample-based run is bitwise the iteration-based run it equals; a ramp trains each iteration at the batch
// Megatron's calculator gives (worked by hand below), saves a checkpoint before each larger batch as Megatron
// does, and a resume from one of those is bitwise the uninterrupted run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "cli/flags.h"
#include "train/trainer.h"

namespace hytra {
namespace {
namespace fs = std::filesystem;

struct Outcome {
  TrainResult result;
  std::string log;
};

Outcome run(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--hybrid-layer-pattern",
                                   "*-M-",
                                   "--mamba-num-groups",
                                   "1",
                                   "--mamba-head-dim",
                                   "16",
                                   "--mamba-state-dim",
                                   "8",
                                   "--hidden-size",
                                   "32",
                                   "--num-attention-heads",
                                   "4",
                                   "--ffn-hidden-size",
                                   "64",
                                   "--normalization",
                                   "RMSNorm",
                                   "--position-embedding-type",
                                   "rope",
                                   "--vocab-size",
                                   "96",
                                   "--make-vocab-size-divisible-by",
                                   "32",
                                   "--seq-length",
                                   "16",
                                   "--micro-batch-size",
                                   "2",
                                   "--lr",
                                   "1e-2",
                                   "--lr-decay-style",
                                   "cosine",
                                   "--eval-interval",
                                   "0",
                                   "--log-interval",
                                   "1",
                                   "--mock-data",
                                   "--device",
                                   "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  ModelConfig m;
  TrainConfig t;
  EXPECT_TRUE(parse_train_args(args, m, t, nullptr));
  std::ostringstream log;
  Outcome r;
  r.result = train(m, t, log);
  r.log = log.str();
  return r;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The values of `field` ("global batch size", "consumed samples") in the iteration lines, in order.
std::vector<int64_t> logged(const std::string& log, const std::string& field) {
  std::vector<int64_t> v;
  const std::regex re(field + ": *([0-9]+)");
  for (auto i = std::sregex_iterator(log.begin(), log.end(), re); i != std::sregex_iterator(); ++i)
    v.push_back(std::stoll((*i)[1].str()));
  return v;
}

TEST(SampleSchedule, SampleBasedRunIsTheIterationRun) {
  // 12 iterations of 4 samples: warmup 2 iterations = 8 samples, decay over all 48.
  const Outcome iters = run({"--global-batch-size", "4", "--train-iters", "12", "--lr-warmup-iters", "2"});
  const Outcome samples = run(
      {"--global-batch-size", "4", "--train-samples", "50", "--lr-warmup-samples", "8", "--lr-decay-samples", "48"});
  ASSERT_EQ(samples.result.losses.size(), 12u);  // 50 samples: 12 whole batches, the partial one dropped
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_TRUE(same_bits(iters.result.losses[i], samples.result.losses[i])) << "iteration " << i + 1;
    EXPECT_TRUE(same_bits(iters.result.grad_norms[i], samples.result.grad_norms[i])) << "iteration " << i + 1;
  }
  EXPECT_NE(samples.log.find("setting training iterations to 12"), std::string::npos) << samples.log;
  // The same warmup as a fraction of the decay samples.
  const Outcome fraction =
      run({"--global-batch-size", "4", "--train-samples", "48", "--lr-warmup-fraction", "0.16666666666666666"});
  EXPECT_NEAR(fraction.result.losses[11], iters.result.losses[11], 1e-9);
}

TEST(SampleSchedule, RampTrainsEachBatchAndResumes) {
  // --rampup-batch-size 2 2 12 to 8: 3 increments, one every 4 samples. Consumed 0 -> 2, 2 -> 2, 4 -> 4, 8 -> 6,
  // 14 (> 12) -> 8: 4 ramp iterations consume 14 samples, then (64 - 14) / 8 = 6 iterations of 8.
  const std::string dir = testing::TempDir() + "hytra_ramp";
  fs::remove_all(dir);
  const std::vector<std::string> ramp = {
      "--global-batch-size", "8", "--train-samples", "64", "--rampup-batch-size", "2", "2", "12",
      "--lr-warmup-samples", "6"};
  std::vector<std::string> saving = ramp;
  saving.insert(saving.end(), {"--save", dir});
  const Outcome full = run(saving);
  ASSERT_EQ(full.result.losses.size(), 10u);
  EXPECT_EQ(logged(full.log, "global batch size"), (std::vector<int64_t>{2, 2, 4, 6, 8, 8, 8, 8, 8, 8}));
  EXPECT_EQ(logged(full.log, "consumed samples"), (std::vector<int64_t>{2, 4, 8, 14, 22, 30, 38, 46, 54, 62}));
  for (const char* line :
       {"will use batch size rampup starting from global batch size 2 to global batch size 8 "
        "with batchsize increments 2 over 12 samples.",
        "setting initial batch size to 2", "ramping up batch size from 2 to 4", "ramping up batch size from 4 to 6",
        "ramping up batch size from 6 to 8", "setting training iterations to 10"})
    EXPECT_NE(full.log.find(line), std::string::npos) << line << "\n" << full.log;
  // A checkpoint before each larger batch (after iterations 2, 3 and 4) and at the end.
  for (int it : {2, 3, 4, 10}) EXPECT_TRUE(fs::exists(dir + "/" + iteration_dir_name(it))) << it;
  EXPECT_EQ(read_manifest(dir + "/" + iteration_dir_name(3)).consumed_samples, 8);
  // Resumed after iteration 3, mid-ramp: bitwise the uninterrupted run's iterations 4 to 10.
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "3\n";
  std::vector<std::string> resuming = ramp;
  resuming.insert(resuming.end(), {"--load", dir});
  const Outcome resumed = run(resuming);
  ASSERT_EQ(resumed.result.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_TRUE(same_bits(full.result.losses[i + 3], resumed.result.losses[i])) << "iteration " << i + 4;
    EXPECT_TRUE(same_bits(full.result.grad_norms[i + 3], resumed.result.grad_norms[i])) << "iteration " << i + 4;
  }
  EXPECT_EQ(logged(resumed.log, "global batch size"), (std::vector<int64_t>{6, 8, 8, 8, 8, 8, 8}));
}

}  // namespace
}  // namespace hytra
