// Configuration validation (model/config.cpp, train/train_config.cpp, the plan's checks): every bad
// value ends in an error naming its flag, before anything is built.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "cli/flag_table.h"
#include "cli/flags.h"
#include "core/error.h"

namespace hytra {
namespace {

// The error of parsing and validating `extra` on top of a small valid model (validation checks the layer
// plan too).
std::string config_error(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "--hybrid-layer-pattern", "*-*-", "--hidden-size",      "32", "--num-attention-heads", "4", "--vocab-size", "64",
      "--seq-length",           "8",    "--micro-batch-size", "1",  "--train-iters",         "1", "--mock-data"};
  args.insert(args.end(), extra.begin(), extra.end());
  ModelConfig m;
  TrainConfig t;
  try {
    parse_train_args(args, m, t, nullptr);
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
  expect_error({"--hybrid-layer-pattern", "", "--num-layers", "4", "--hybrid-mlp-ratio", "-0.5"}, "--hybrid-mlp-ratio");
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

// Values that used to reach an internal assertion, a crash or a misleading error far from their flag.
TEST(Config, HugeSizesNameTheirFlag) {
  const std::string max64 = "9223372036854775807";
  for (const char* flag :
       {"--seq-length", "--kv-channels", "--max-position-embeddings", "--vocab-size", "--mamba-chunk-size",
        "--hidden-size", "--ffn-hidden-size", "--micro-batch-size", "--global-batch-size"})
    expect_error({flag, max64}, flag);
  expect_error({"--vocab-size", max64, "--make-vocab-size-divisible-by", "1"}, "--vocab-size");
  expect_error({"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--moe-ffn-hidden-size", max64},
               "--moe-ffn-hidden-size");
  expect_error({"--hybrid-layer-pattern", "*E", "--num-experts", max64}, "--num-experts");
  expect_error({"--hybrid-layer-pattern", "G", "--normalization", "RMSNorm", "--linear-conv-kernel-dim", max64},
               "--linear-conv-kernel-dim");
  expect_error({"--hybrid-layer-pattern", "", "--num-layers", max64}, "--num-layers");
  expect_error({"--enable-mhc-connections", "--mhc-sinkhorn-iterations", "1000000000"}, "--mhc-sinkhorn-iterations");
}

TEST(Config, NonFiniteAndNegativeValuesNameTheirFlag) {
  expect_error({"--position-embedding-type", "rope", "--rotary-base", "0"}, "--rotary-base");
  expect_error({"--position-embedding-type", "rope", "--rotary-base", "nan"}, "--rotary-base");
  expect_error({"--init-method-std", "inf"}, "--init-method-std");
  expect_error({"--swiglu", "--glu-linear-offset", "nan"}, "--glu-linear-offset");
  expect_error({"--mtp-loss-scaling-factor", "inf"}, "--mtp-loss-scaling-factor");
  expect_error({"--enable-mhc-connections", "--mhc-init-gating-factor", "inf"}, "--mhc-init-gating-factor");
  expect_error({"--weight-decay", "inf"}, "--weight-decay");
  const std::vector<std::string> moe = {"--hybrid-layer-pattern", "*E", "--num-experts", "4"};
  auto with_moe = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), moe.begin(), moe.end());
    return extra;
  };
  expect_error(with_moe({"--moe-expert-capacity-factor", "inf"}), "--moe-expert-capacity-factor");
  expect_error(with_moe({"--moe-router-topk-scaling-factor", "nan"}), "--moe-router-topk-scaling-factor");
  expect_error(with_moe({"--moe-aux-loss-coeff", "inf"}), "--moe-aux-loss-coeff");
  expect_error(with_moe({"--moe-router-num-groups", "-1"}), "--moe-router-num-groups");
  expect_error(with_moe({"--moe-ffn-hidden-size", "-1"}), "--moe-ffn-hidden-size");
  expect_error({"--max-position-embeddings", "-1"}, "--max-position-embeddings");
  for (const char* flag : {"--lr-decay-iters", "--lr-warmup-init", "--ckpt-keep", "--save-interval", "--exit-interval"})
    expect_error({flag, "-5"}, flag);
}

// int(8 x 16 / 3 / 64) x 64 = 0: a zero-width MLP divided by zero in the SwiGLU kernel.
TEST(Config, SwigluDefaultWidthOfZeroIsRefused) {
  expect_error({"--swiglu", "--hidden-size", "16"}, "--ffn-hidden-size");
  expect_error({"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--swiglu", "--hidden-size", "16"},
               "--ffn-hidden-size");
  EXPECT_EQ(config_error({"--swiglu", "--hidden-size", "16", "--ffn-hidden-size", "24"}), "no error");
}

// Two sub-layers of one group whose hyper-connections would share a key (duplicate parameters).
TEST(Config, MhcGroupsWithTwoMlpsOrTwoMixersAreRefused) {
  for (const char* p : {"[M*][-E]", "[GM]"})
    expect_error(
        {"--enable-mhc-connections", "--normalization", "RMSNorm", "--hybrid-layer-pattern", p, "--num-experts", "4"},
        "--enable-mhc-connections");
  EXPECT_EQ(config_error({"--enable-mhc-connections", "--hybrid-layer-pattern", "[M*][-*]", "--mamba-num-groups", "1"}),
            "no error");
}

// Only data parallelism runs: a larger model-parallel size is refused naming its flag; the global batch must
// split into micro-batches over the data-parallel ranks.
TEST(Config, ParallelSizesAndTheDataParallelBatch) {
  expect_error({"--tensor-model-parallel-size", "0"},
               "--tensor-model-parallel-size: expected a positive integer, got 0");
  expect_error({"--pipeline-model-parallel-size", "0"},
               "--pipeline-model-parallel-size: expected a positive integer, got 0");
  expect_error({"--context-parallel-size", "2"}, "--context-parallel-size 2: context parallelism");
  expect_error({"--expert-model-parallel-size", "0"}, "--expert-model-parallel-size: expected a positive integer");
  expect_error({"--log-ep-overlap"}, "--log-ep-overlap: needs --overlap-moe-expert-parallel-comm");
  expect_error({"--expert-tensor-parallel-size", "2"},
               "--expert-tensor-parallel-size 2: the experts split over the tensor-parallel ranks alone");
  expect_error({"--overlap-param-gather", "--overlap-grad-reduce"},
               "--overlap-param-gather: needs --use-distributed-optimizer and --overlap-grad-reduce");
  expect_error({"--overlap-param-gather", "--use-distributed-optimizer"},
               "--overlap-param-gather: needs --use-distributed-optimizer and --overlap-grad-reduce");
  expect_error({"--ddp-bucket-size", "-5"}, "--ddp-bucket-size: expected a positive number of elements, got -5");
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 8;
  t.train_iters = 1;
  t.mock_data = true;
  t.data_parallel_size = 2;
  t.validate();
  EXPECT_EQ(t.num_micro_batches(), 2);
  t.data_parallel_size = 3;
  try {
    t.validate();
    ADD_FAILURE() << "no error for 3 data-parallel ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--global-batch-size: expected a multiple of --micro-batch-size (2) x the "
                                         "data-parallel size (3) = 6, got 8"),
              std::string::npos)
        << e.what();
  }
}

// The data order is numpy's RandomState(seed): a seed past 32 bits was silently truncated.
TEST(Config, DataSeedsMustFitRandomState) {
  TrainConfig t;
  t.micro_batch_size = 1;
  t.train_iters = 1;
  t.data_path = {"prefix"};
  t.tokenizer.type = "GPT2BPETokenizer";
  for (uint64_t seed : {uint64_t(1) << 32, ~uint64_t(0)}) {
    t.seed = seed;
    try {
      t.validate();
      ADD_FAILURE() << "no error for seed " << seed;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--seed: expected 0..4294967295 with --data-path"), std::string::npos)
          << e.what();
    }
  }
  t.seed = 4294967295u;
  t.validate();
  t.data_path.clear();
  t.mock_data = true;
  t.seed = uint64_t(1) << 32;  // mock data and init take 64-bit seeds
  t.validate();
}

TEST(Config, PatternsWithoutLayersAreRefused) {
  for (const char* p : {"|", "||", "/", "//", "|/", "/*"}) expect_error({"--hybrid-layer-pattern", p}, "pattern");
}

TEST(Config, ValidEdgeValuesPass) {
  EXPECT_EQ(
      config_error({"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "4"}),
      "no error");
  EXPECT_EQ(
      config_error({"--hybrid-layer-pattern", "*E*E", "--num-experts", "4", "--moe-expert-capacity-factor", "1.5"}),
      "no error");
  // Huge but finite: the dispatcher caps the capacity at the token count.
  EXPECT_EQ(
      config_error({"--hybrid-layer-pattern", "*E*E", "--num-experts", "4", "--moe-expert-capacity-factor", "1e300"}),
      "no error");
  EXPECT_EQ(config_error({"--seq-length", "2147483647", "--position-embedding-type", "rope"}), "no error");
}

// Parsing reads no file but --config; the tokenizer is read when the configuration is resolved.
TEST(Config, FlagParsingReadsNoTokenizerFile) {
  const std::vector<std::string> args = {"--hybrid-layer-pattern",
                                         "*-",
                                         "--hidden-size",
                                         "32",
                                         "--num-attention-heads",
                                         "4",
                                         "--seq-length",
                                         "8",
                                         "--micro-batch-size",
                                         "1",
                                         "--train-iters",
                                         "1",
                                         "--data-path",
                                         "nowhere",
                                         "--tokenizer-type",
                                         "GPT2BPETokenizer",
                                         "--vocab-file",
                                         "/nonexistent/encoder.json",
                                         "--merge-file",
                                         "/nonexistent/vocab.bpe"};
  ModelConfig m;
  TrainConfig t;
  EXPECT_TRUE(parse_train_flags(args, m, t, nullptr));
  EXPECT_EQ(t.tokenizer.vocab_file, "/nonexistent/encoder.json");
  try {
    resolve_train_config(m, t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/encoder.json"), std::string::npos) << e.what();
  }
}

// --help shows a bound field's initialiser itself; a row's own default text must say something else
// (what an unset value means), never repeat the initialiser (written once, in the config struct). Every row reads
// its field back (the resolved run configuration holds them all).
TEST(Config, HelpDefaultsComeFromTheConfigStructs) {
  ModelConfig m;
  TrainConfig t;
  FlagTable table;
  add_model_flags(table, m);
  add_train_flags(table, t);
  for (const FlagSpec& row : table.rows()) {
    ASSERT_TRUE(bool(row.value)) << row.name << ": no value getter";
    const std::optional<FlagValues> v = row.value();
    if (!v) continue;
    std::string text;
    for (const std::string& x : *v) text += (text.empty() ? "" : " ") + x;
    EXPECT_NE(row.default_text, text) << row.name << ": the default text repeats the field's initialiser";
  }
  EXPECT_GT(table.rows().size(), 150u);
  const std::string help = table.help_text("hytra train");
  EXPECT_NE(help.find("--moe-router-topk"), std::string::npos);
  EXPECT_NE(help.find("(default: 2)"), std::string::npos) << help;  // --moe-router-topk, from ModelConfig
}

// The resolved run configuration (each checkpoint's run_config.yaml) read back with --config gives the same run:
// the same resolved text (a fixed point), the same configs; values decided at run time (the iterations of a
// sample-based run, the decay horizon) are derived again instead of being written; strings with quotes,
// backslashes and control bytes survive the YAML quoting.
TEST(Config, ResolvedFlagsReadBackAsTheSameRun) {
  const std::vector<std::string> args = {"--hybrid-layer-pattern",
                                         "M*-[*E]/*-",
                                         "--hidden-size",
                                         "64",
                                         "--num-attention-heads",
                                         "4",
                                         "--vocab-size",
                                         "96",
                                         "--seq-length",
                                         "16",
                                         "--micro-batch-size",
                                         "2",
                                         "--global-batch-size",
                                         "8",
                                         "--train-samples",
                                         "800",
                                         "--rampup-batch-size",
                                         "4",
                                         "4",
                                         "64",
                                         "--lr",
                                         "3e-4",
                                         "--min-lr",
                                         "1e-5",
                                         "--lr-decay-style",
                                         "WSD",
                                         "--lr-wsd-decay-samples",
                                         "160",
                                         "--num-experts",
                                         "4",
                                         "--moe-router-topk",
                                         "2",
                                         "--swiglu",
                                         "--disable-bias-linear",
                                         "--recompute-granularity",
                                         "selective",
                                         "--recompute-modules",
                                         "mlp",
                                         "moe_act",
                                         "--no-check-for-nan-in-loss-and-grad",
                                         "--seed",
                                         "77",
                                         "--mock-data",
                                         "--device",
                                         "cpu",
                                         "--tiktoken-special-tokens",
                                         "<a\"b>",
                                         "",
                                         "c\\d",
                                         "tab\tx",
                                         "--mamba-num-groups",
                                         "2"};
  ModelConfig m1;
  TrainConfig t1;
  ASSERT_TRUE(parse_train_flags(args, m1, t1, nullptr));
  const std::string text = t1.run_config;
  EXPECT_EQ(text.rfind("# hytra train", 0), 0u) << text;
  EXPECT_NE(text.find("\nhybrid-layer-pattern: \"M*-[*E]/*-\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nrampup-batch-size: [4, 4, 64]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nswiglu: true\nsquared-relu: false\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ndisable-bias-linear: true\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nseed: 77\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\ntrain-iters:"), std::string::npos) << text;     // derived from --train-samples
  EXPECT_EQ(text.find("\nlr-decay-iters:"), std::string::npos) << text;  // derived from the run's length
  EXPECT_EQ(text.find("\nnum-layers:"), std::string::npos) << text;      // derived from the pattern
  EXPECT_EQ(text.find("use-mcore-models"), std::string::npos) << text;   // flags with no effect are not runs'
  const std::string path = testing::TempDir() + "hytra_resolved_flags.yaml";
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  ModelConfig m2;
  TrainConfig t2;
  ASSERT_TRUE(parse_train_flags({"--config", path}, m2, t2, nullptr));
  EXPECT_EQ(t2.run_config, text);
  EXPECT_EQ(m2.hybrid_layer_pattern, m1.hybrid_layer_pattern);
  EXPECT_EQ(m2.activation, Activation::SwiGLU);
  EXPECT_FALSE(m2.add_bias_linear);
  EXPECT_EQ(m2.recompute_modules, m1.recompute_modules);
  EXPECT_FALSE(t2.check_for_nan_in_loss_and_grad);
  EXPECT_EQ(t2.seed, 77u);
  EXPECT_EQ(t2.tokenizer.tiktoken_special_tokens, (std::vector<std::string>{"<a\"b>", "", "c\\d", "tab\tx"}));
  EXPECT_EQ(t2.train_iters, t1.train_iters);
  EXPECT_GT(t2.train_iters, 0);
  EXPECT_EQ(t2.lr_decay_iters, t1.lr_decay_iters);
  EXPECT_EQ(t2.lr, t1.lr);
  EXPECT_EQ(t2.min_lr, t1.min_lr);
  EXPECT_EQ(t2.rampup.samples, 64);
}

}  // namespace
}  // namespace hytra
