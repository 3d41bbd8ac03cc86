// Configuration validation (model/config.cpp, train/train_config.cpp, the plan's checks): every bad
// value ends in an error naming its flag, before anything is built.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/hybrid_model.h"
#include "train/flags.h"

namespace hytra {
namespace {

// The error of parsing `extra` on top of a small valid model and building its layer plan.
std::string config_error(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--hybrid-layer-pattern", "*-*-", "--hidden-size", "32", "--num-attention-heads",
                                   "4", "--vocab-size", "64", "--seq-length", "8", "--micro-batch-size", "1",
                                   "--train-iters", "1", "--mock-data"};
  args.insert(args.end(), extra.begin(), extra.end());
  ModelConfig m;
  TrainConfig t;
  try {
    parse_train_args(args, m, t, nullptr);
    plan_for(m);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void expect_error(const std::vector<std::string>& extra, const std::string& flag) {
  const std::string e = config_error(extra);
  EXPECT_NE(e.find(flag), std::string::npos) << "args ending " << extra.back() << " gave: " << e;
  EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
}

TEST(Config, TheBaseIsValid) { EXPECT_EQ(config_error({}), "no error"); }

TEST(Config, OutOfRangeValuesNameTheirFlag) {
  expect_error({"--kv-channels", "-8"}, "--kv-channels");
  expect_error({"--mtp-num-layers", "-1"}, "--mtp-num-layers");
  expect_error({"--num-layers", "-4", "--hybrid-layer-pattern", ""}, "--num-layers");
  expect_error({"--hybrid-layer-pattern", "", "--num-layers", "4", "--hybrid-attention-ratio", "nan"},
               "--hybrid-attention-ratio");
  expect_error({"--hybrid-layer-pattern", "", "--num-layers", "4", "--hybrid-mlp-ratio", "-0.5"},
               "--hybrid-mlp-ratio");
  expect_error({"--hybrid-layer-pattern", "", "--num-layers", "4", "--hybrid-mlp-ratio", "0.6",
                "--hybrid-attention-ratio", "0.6"},
               "at most 1");
  expect_error({"--hybrid-layer-pattern", "*E*E", "--num-experts", "4", "--moe-expert-capacity-factor", "-1"},
               "--moe-expert-capacity-factor");
  expect_error({"--hybrid-layer-pattern", "*E*E", "--num-experts", "4", "--moe-expert-capacity-factor", "0"},
               "--moe-expert-capacity-factor");
  expect_error({"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "5"},
               "--recompute-num-layers");
  expect_error({"--lr", "inf"}, "--lr");
  expect_error({"--lr", "nan"}, "--lr");
}

TEST(Config, PatternsWithoutLayersAreRefused) {
  for (const char* p : {"|", "||", "/", "//", "|/", "/*"}) expect_error({"--hybrid-layer-pattern", p}, "pattern");
}

TEST(Config, ValidEdgeValuesPass) {
  EXPECT_EQ(config_error({"--recompute-granularity", "full", "--recompute-method", "uniform",
                          "--recompute-num-layers", "4"}),
            "no error");
  EXPECT_EQ(config_error({"--hybrid-layer-pattern", "*E*E", "--num-experts", "4", "--moe-expert-capacity-factor",
                          "1.5"}),
            "no error");
}

}  // namespace
}  // namespace hytra
