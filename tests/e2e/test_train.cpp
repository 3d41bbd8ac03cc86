// End-to-end training on the CPU: a tiny `*-*-` model and an `M*G-` hybrid on --mock-data learn (loss
// falls by more than 2 nats) and two identical runs give bitwise-identical losses and gradient norms
// at every iteration.
// With a GPU visible (skipped otherwise): the CUDA run tracks the CPU run (fp32: to rounding; bf16
// mixed precision: within bf16 tolerance) and two bf16 GPU runs are bitwise identical; CUDA-graph
// replays are bitwise the eager run.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/bench.h"
#include "cli/flags.h"
#include "common/error_of.h"
#include "common/tensorboard_reader.h"
#include "core/device.h"
#include "core/error.h"
#include "model/hybrid_model.h"
#include "train/trainer.h"

namespace hytra {
namespace {

void tiny_config(ModelConfig& m, TrainConfig& t, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"--hybrid-layer-pattern",
                                   "*-*-",
                                   "--hidden-size",
                                   "32",
                                   "--num-attention-heads",
                                   "4",
                                   "--group-query-attention",
                                   "--num-query-groups",
                                   "2",
                                   "--ffn-hidden-size",
                                   "64",
                                   "--normalization",
                                   "RMSNorm",
                                   "--position-embedding-type",
                                   "rope",
                                   "--swiglu",
                                   "--vocab-size",
                                   "96",
                                   "--make-vocab-size-divisible-by",
                                   "32",
                                   "--seq-length",
                                   "32",
                                   "--micro-batch-size",
                                   "4",
                                   "--global-batch-size",
                                   "8",
                                   "--train-iters",
                                   "40",
                                   "--lr",
                                   "1e-2",
                                   "--min-lr",
                                   "1e-3",
                                   "--lr-decay-style",
                                   "cosine",
                                   "--lr-warmup-iters",
                                   "4",
                                   "--eval-interval",
                                   "20",
                                   "--eval-iters",
                                   "2",
                                   "--log-interval",
                                   "10",
                                   "--mock-data",
                                   "--device",
                                   "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  ASSERT_TRUE(parse_train_args(args, m, t, nullptr));
}

// The tiny model as a hybrid of all four built sub-layer kinds (Mamba-2, attention, gated delta
// net, MLP), chunk sizes that split the 32-token sequences into several chunks.
const std::vector<std::string> kHybrid = {"--hybrid-layer-pattern", "M*G-", "--mamba-num-heads",        "4",
                                          "--mamba-head-dim",       "16",   "--mamba-num-groups",       "2",
                                          "--mamba-state-dim",      "16",   "--mamba-chunk-size",       "8",
                                          "--linear-num-key-heads", "2",    "--linear-num-value-heads", "4",
                                          "--linear-key-head-dim",  "8",    "--linear-value-head-dim",  "8"};

// A GPT stack (no pattern) of multi-latent attention layers (docs/spec/mla.md) with the query latent and latent norms.
const std::vector<std::string> kMla = {"--hybrid-layer-pattern",
                                       "",
                                       "--num-layers",
                                       "2",
                                       "--multi-latent-attention",
                                       "--q-lora-rank",
                                       "16",
                                       "--kv-lora-rank",
                                       "12",
                                       "--qk-head-dim",
                                       "8",
                                       "--qk-pos-emb-head-dim",
                                       "4",
                                       "--v-head-dim",
                                       "8",
                                       "--qk-layernorm",
                                       "--normalization",
                                       "RMSNorm",
                                       "--rotary-scaling-factor",  // YaRN
                                       "40",
                                       "--mscale",
                                       "1",
                                       "--mscale-all-dim",
                                       "1"};

TEST(Train, LossFallsAndRunsAreBitwiseIdentical) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t);
  std::ostringstream log1, log2;
  TrainResult a = train(m, t, log1);
  TrainResult b = train(m, t, log2);
  ASSERT_EQ(a.losses.size(), 40u);
  EXPECT_GT(a.losses.front() - a.losses.back(), 2.0) << "first " << a.losses.front() << " last " << a.losses.back();
  EXPECT_NEAR(a.losses.front(), std::log(96.0), 0.5);  // an untrained model is near-uniform over the vocab
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "iteration " << i + 1;
    EXPECT_EQ(std::memcmp(&a.grad_norms[i], &b.grad_norms[i], sizeof(double)), 0) << "iteration " << i + 1;
  }
  ASSERT_EQ(a.val_losses.size(), 2u);
  EXPECT_LT(a.val_losses.back(), a.val_losses.front() + 1e-9);
  EXPECT_NE(log1.str().find("lm loss:"), std::string::npos);
  EXPECT_NE(log1.str().find("validation loss at iteration 20"), std::string::npos);
}

TEST(Train, HybridMambaGdnLearnsAndRunsAreBitwiseIdentical) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t, kHybrid);
  std::ostringstream log1, log2;
  TrainResult a = train(m, t, log1);
  TrainResult b = train(m, t, log2);
  ASSERT_EQ(a.losses.size(), 40u);
  EXPECT_GT(a.losses.front() - a.losses.back(), 2.0) << "first " << a.losses.front() << " last " << a.losses.back();
  EXPECT_NEAR(a.losses.front(), std::log(96.0), 0.5);
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "iteration " << i + 1;
    EXPECT_EQ(std::memcmp(&a.grad_norms[i], &b.grad_norms[i], sizeof(double)), 0) << "iteration " << i + 1;
  }
  ASSERT_EQ(a.val_losses.size(), 2u);
  EXPECT_LT(a.val_losses.back(), a.val_losses.front());
}

TEST(Train, MultiLatentAttentionLearnsAndRunsAreBitwiseIdentical) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t, kMla);
  EXPECT_EQ(plan_for(m).main, "[+-][+-]");
  std::ostringstream log1, log2;
  TrainResult a = train(m, t, log1);
  TrainResult b = train(m, t, log2);
  ASSERT_EQ(a.losses.size(), 40u);
  EXPECT_GT(a.losses.front() - a.losses.back(), 2.0) << "first " << a.losses.front() << " last " << a.losses.back();
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "iteration " << i + 1;
  // Selective recompute of the up projections and the core attention (docs/spec/mla.md §4): the same bits.
  std::vector<std::string> recompute = kMla;
  recompute.insert(recompute.end(),
                   {"--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj", "core_attn"});
  ModelConfig mr;
  TrainConfig tr;
  tiny_config(mr, tr, recompute);
  const TrainResult r = train(mr, tr, log2);
  ASSERT_EQ(r.losses.size(), a.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &r.losses[i], sizeof(double)), 0) << "recompute, iteration " << i + 1;
    EXPECT_EQ(std::memcmp(&a.grad_norms[i], &r.grad_norms[i], sizeof(double)), 0) << "recompute, iteration " << i + 1;
  }
}

// Two MoE layers (softmax top-2 of 4 experts, aux and z losses, a shared expert) between attention
// and an MLP: the model learns, logs its MoE losses (line and JSONL), and --delay-wgrad-compute
// reproduces the run bit for bit.
TEST(Train, MoeLearnsLogsItsLossesAndDelayedWgradIsBitwiseIdentical) {
  const std::string path = testing::TempDir() + "hytra_moe.jsonl";
  std::remove(path.c_str());
  const std::vector<std::string> moe = {"--hybrid-layer-pattern",
                                        "*E-E",
                                        "--num-experts",
                                        "4",
                                        "--moe-ffn-hidden-size",
                                        "32",
                                        "--moe-aux-loss-coeff",
                                        "1e-2",
                                        "--moe-z-loss-coeff",
                                        "1e-3",
                                        "--moe-shared-expert-intermediate-size",
                                        "32"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), moe.begin(), moe.end());
    return extra;
  };
  ModelConfig m1, m2;
  TrainConfig t1, t2;
  tiny_config(m1, t1, with({"--log-jsonl", path}));
  tiny_config(m2, t2, with({"--delay-wgrad-compute"}));
  std::ostringstream log1, log2;
  TrainResult a = train(m1, t1, log1);
  TrainResult b = train(m2, t2, log2);
  ASSERT_EQ(a.losses.size(), 40u);
  EXPECT_GT(a.losses.front() - a.losses.back(), 2.0) << "first " << a.losses.front() << " last " << a.losses.back();
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "iteration " << i + 1;
    EXPECT_EQ(std::memcmp(&a.grad_norms[i], &b.grad_norms[i], sizeof(double)), 0) << "iteration " << i + 1;
  }
  EXPECT_NE(log1.str().find("load_balancing_loss: "), std::string::npos);
  EXPECT_NE(log1.str().find("z_loss: "), std::string::npos);
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  for (const char* key : {"\"load_balancing_loss\": ", "\"moe_layers\": [{\"layer\": 2, ", "\"tokens_per_expert\": ["})
    EXPECT_NE(first.find(key), std::string::npos) << key << " in " << first;
}

// --tensorboard-dir: the event file holds Megatron's scalar names at the right steps (training scalars every
// iteration, also against the consumed samples; timing at the log lines; validation with its perplexity; each MoE
// layer's auxiliary loss; the MTP depth's loss), with the run's own values.
TEST(Train, TensorBoardScalarsCarryTheRunsValues) {
  const std::string dir = testing::TempDir() + "hytra_tb_run";
  std::filesystem::remove_all(dir);
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t,
              {"--hybrid-layer-pattern",
               "*E-E/*-",
               "--num-experts",
               "4",
               "--moe-ffn-hidden-size",
               "32",
               "--moe-aux-loss-coeff",
               "1e-2",
               "--train-iters",
               "6",
               "--log-interval",
               "2",
               "--eval-interval",
               "3",
               "--eval-iters",
               "1",
               "--tensorboard-dir",
               dir,
               "--log-batch-size-to-tensorboard",
               "--log-world-size-to-tensorboard",
               "--log-timers-to-tensorboard",
               "--log-throughput",
               "--log-params-norm",
               "--log-num-zeros-in-grad",
               "--log-memory-to-tensorboard",
               "--log-validation-ppl-to-tensorboard",
               "--moe-per-layer-logging"});
  std::ostringstream log;
  const TrainResult r = train(m, t, log);
  for (const char* field : {" throughput per GPU (TFLOP/s/GPU): ", " num zeros: ", " params norm: "})
    EXPECT_NE(log.str().find(field), std::string::npos) << field;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const std::vector<test::TbEvent> events = test::read_tensorboard(files[0].string());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  const auto tags = test::tensorboard_scalars(events);
  auto steps = [&](const std::string& tag) {
    std::vector<int64_t> out;
    if (tags.count(tag))
      for (const auto& [step, v] : tags.at(tag)) out.push_back(step);
    return out;
  };
  const std::vector<int64_t> every = {1, 2, 3, 4, 5, 6}, samples = {8, 16, 24, 32, 40, 48};
  for (const char* tag : {"learning-rate", "batch-size", "lm loss", "loss-scale", "world-size", "grad-norm",
                          "params-norm", "num-zeros"}) {
    EXPECT_EQ(steps(tag), every) << tag;
    EXPECT_EQ(steps(std::string(tag) + " vs samples"), samples) << tag;
  }
  for (const char* tag :
       {"mtp_1 loss", "load_balancing_loss", "moe/load_balancing_loss_layer_1", "moe/load_balancing_loss_layer_3",
        "mem-reserved-bytes", "mem-allocated-bytes", "mem-max-allocated-bytes"})
    EXPECT_EQ(steps(tag), every) << tag;
  for (const char* tag : {"throughput", "iteration-time"})
    EXPECT_EQ(steps(tag), (std::vector<int64_t>{2, 4, 6})) << tag;
  for (const char* tag : {"lm loss validation", "lm loss validation ppl"})
    EXPECT_EQ(steps(tag), (std::vector<int64_t>{3, 6})) << tag;
  EXPECT_EQ(steps("lm loss validation vs samples"), (std::vector<int64_t>{24, 48}));
  for (int64_t i = 1; i <= 6; ++i) {
    EXPECT_EQ(tags.at("lm loss").at(i), float(r.losses[size_t(i - 1)])) << i;
    EXPECT_EQ(tags.at("lm loss vs samples").at(8 * i), float(r.losses[size_t(i - 1)])) << i;
    EXPECT_EQ(tags.at("grad-norm").at(i), float(r.grad_norms[size_t(i - 1)])) << i;
    EXPECT_EQ(tags.at("batch-size").at(i), 8.0f);
    EXPECT_GT(tags.at("moe/load_balancing_loss_layer_1").at(i), 0.0f);
  }
  ASSERT_EQ(r.val_losses.size(), 2u);
  EXPECT_EQ(tags.at("lm loss validation").at(6), float(r.val_losses[1]));
  EXPECT_FLOAT_EQ(tags.at("lm loss validation ppl").at(6), float(std::exp(r.val_losses[1])));
  // Megatron's flags that only change what the file holds: without them, no learning-rate and no loss-scale.
  std::filesystem::remove_all(dir);
  ModelConfig m2;
  TrainConfig t2;
  tiny_config(m2, t2,
              {"--train-iters", "6", "--tensorboard-dir", dir, "--no-log-learnig-rate-to-tensorboard",
               "--no-log-loss-scale-to-tensorboard", "--tensorboard-log-interval", "2"});
  std::ostringstream log2;
  train(m2, t2, log2);
  for (const char* field : {" throughput per GPU (TFLOP/s/GPU): ", " num zeros: ", " params norm: "})
    EXPECT_EQ(log2.str().find(field), std::string::npos) << field << " without its flag";
  std::vector<std::filesystem::path> again;
  for (const auto& e : std::filesystem::directory_iterator(dir)) again.push_back(e.path());
  ASSERT_EQ(again.size(), 1u);
  const auto tags2 = test::tensorboard_scalars(test::read_tensorboard(again[0].string()));
  EXPECT_EQ(tags2.count("learning-rate"), 0u);
  EXPECT_EQ(tags2.count("loss-scale"), 0u);
  for (const char* tag : {"throughput", "params-norm", "num-zeros"}) EXPECT_EQ(tags2.count(tag), 0u) << tag;
  ASSERT_EQ(tags2.count("lm loss"), 1u);
  EXPECT_EQ(tags2.at("lm loss").size(), 3u);  // iterations 2, 4, 6
}

// Multi-token prediction (two depths of `*-` after an `M*-` stack): the model learns, the log shows
// each depth's loss, and two runs agree bit for bit.
TEST(Train, MtpLearnsLogsItsDepthsAndIsBitwiseDeterministic) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t,
              {"--hybrid-layer-pattern", "M*-/*-/*-", "--mamba-num-heads", "4", "--mamba-head-dim", "16",
               "--mamba-num-groups", "2", "--mamba-state-dim", "16", "--mtp-loss-scaling-factor", "0.5"});
  std::ostringstream log1, log2;
  TrainResult a = train(m, t, log1);
  TrainResult b = train(m, t, log2);
  EXPECT_GT(a.losses.front() - a.losses.back(), 2.0) << "first " << a.losses.front() << " last " << a.losses.back();
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "iteration " << i + 1;
    EXPECT_EQ(std::memcmp(&a.grad_norms[i], &b.grad_norms[i], sizeof(double)), 0) << "iteration " << i + 1;
  }
  const std::string text = log1.str();
  const size_t at = text.rfind("mtp_2 loss: ");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NE(text.find("mtp_1 loss: "), std::string::npos);
  EXPECT_LT(std::stod(text.substr(at + 12)), std::log(96.0) - 1.0);  // the depths learn too
}

// Activation recompute (docs/spec/recompute.md, docs/spec/README.md decisions 4-5): every setting reproduces the run
// without recompute bit for bit (losses and gradient norms), on a model with Mamba, attention, MoE, gated delta net and
// MLP layers, a `[*-]` group and an MTP depth, with and without mHC (every sub-layer kind under mHC). (The
// saved-activation bytes are measured in tests/unit/test_hybrid_model.cpp: in this tiny run the optimizer state
// dominates.)
void check_recompute_is_bitwise(const std::vector<std::string>& device) {
  const std::vector<std::string> model = {"--hybrid-layer-pattern",
                                          "M[*-]EG-/*-",
                                          "--linear-num-key-heads",
                                          "2",
                                          "--linear-num-value-heads",
                                          "2",
                                          "--linear-key-head-dim",
                                          "8",
                                          "--linear-value-head-dim",
                                          "8",
                                          "--mamba-num-heads",
                                          "4",
                                          "--mamba-head-dim",
                                          "16",
                                          "--mamba-num-groups",
                                          "2",
                                          "--mamba-state-dim",
                                          "16",
                                          "--mamba-chunk-size",
                                          "8",
                                          "--num-experts",
                                          "4",
                                          "--moe-ffn-hidden-size",
                                          "32",
                                          "--moe-shared-expert-intermediate-size",
                                          "16",
                                          "--moe-aux-loss-coeff",
                                          "1e-2",
                                          "--moe-router-load-balancing-type",
                                          "global_aux_loss",
                                          "--train-iters",
                                          "6",
                                          "--eval-interval",
                                          "0"};
  auto run = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), model.begin(), model.end());
    extra.insert(extra.end(), device.begin(), device.end());
    ModelConfig m;
    TrainConfig t;
    tiny_config(m, t, extra);
    std::ostringstream log;
    return train(m, t, log);
  };
  for (bool mhc : {false, true}) {
    const std::vector<std::string> base =
        mhc ? std::vector<std::string>{"--enable-mhc-connections", "--mhc-num-residual-streams", "2"}
            : std::vector<std::string>{};
    auto with = [&](std::vector<std::string> extra) {
      extra.insert(extra.begin(), base.begin(), base.end());
      return extra;
    };
    const TrainResult ref = run(with({}));
    std::vector<std::vector<std::string>> settings = {
        {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
        {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"},
        {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"}};
    settings.push_back(
        {"--recompute-granularity", "selective", "--recompute-modules", "core_attn", "moe_act", "shared_experts"});
    settings.push_back({"--recompute-granularity", "selective", "--recompute-modules", "layernorm"});
    settings.push_back(
        {"--recompute-granularity", "selective", "--recompute-modules", "layernorm", "shared_experts", "moe_act"});
    settings.push_back({"--recompute-granularity", "selective", "--recompute-modules", "moe", "mamba"});
    if (!mhc) {
      settings.push_back({"--recompute-granularity", "selective", "--recompute-modules", "mlp", "moe", "mamba"});
    } else {
      settings.push_back({"--recompute-granularity", "selective", "--recompute-modules", "mhc"});  // default blocks
      settings.push_back(
          {"--recompute-granularity", "selective", "--recompute-modules", "mhc", "--mhc-recompute-layer-num", "2"});
    }
    for (const auto& setting : settings) {
      const TrainResult r = run(with(setting));
      std::string name = mhc ? "mhc" : "plain";
      for (const auto& a : setting) name += " " + a;
      ASSERT_EQ(r.losses.size(), ref.losses.size()) << name;
      for (size_t i = 0; i < ref.losses.size(); ++i) {
        EXPECT_EQ(std::memcmp(&r.losses[i], &ref.losses[i], sizeof(double)), 0) << name << " iteration " << i + 1;
        EXPECT_EQ(std::memcmp(&r.grad_norms[i], &ref.grad_norms[i], sizeof(double)), 0)
            << name << " iteration " << i + 1;
      }
      std::printf("peak allocated bytes, %s: %lld (no recompute: %lld)\n", name.c_str(), (long long)r.peak_memory_bytes,
                  (long long)ref.peak_memory_bytes);
    }
  }
}

TEST(Train, RecomputeIsBitwiseIdentical) { check_recompute_is_bitwise({}); }

// The seed and deprecated spellings Megatron users have in their scripts (docs/spec/README.md decision 3,
// docs/spec/moe.md §3).
TEST(Train, FlagAliasesSetTheSameFields) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t,
              {"--hybrid-override-pattern", "*E", "--num-experts", "4", "--moe-router-padding-for-fp8",
               "--enable-hyper-connections", "--num-residual-streams", "2"});
  EXPECT_EQ(m.hybrid_layer_pattern, "*E");
  EXPECT_TRUE(m.moe_router_padding_for_quantization);
  EXPECT_TRUE(m.enable_mhc);
  EXPECT_EQ(m.mhc_num_residual_streams, 2);
}

TEST(Train, SeedChangesTheRun) {
  ModelConfig m1, m2;
  TrainConfig t1, t2;
  tiny_config(m1, t1, {"--train-iters", "2", "--lr-warmup-iters", "0", "--eval-interval", "0"});
  tiny_config(m2, t2, {"--train-iters", "2", "--lr-warmup-iters", "0", "--eval-interval", "0", "--seed", "99"});
  std::ostringstream log;
  EXPECT_NE(train(m1, t1, log).losses[0], train(m2, t2, log).losses[0]);
}

TEST(Train, BadFlagsAreNamedErrors) {
  auto expect_error = [](const std::vector<std::string>& extra, const std::string& needle) {
    ModelConfig m;
    TrainConfig t;
    try {
      tiny_config(m, t, extra);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({"--hidden-dropout", "0.1"}, "--hidden-dropout");
  expect_error({"--global-batch-size", "6"}, "--global-batch-size");
  expect_error({"--num-query-groups", "3"}, "--num-query-groups");
  expect_error({"--lr-decay-stile", "cosine"}, "--lr-decay-style");
  auto expect_train_error = [](const std::vector<std::string>& extra, const std::string& needle) {
    ModelConfig m;
    TrainConfig t;
    std::ostringstream log;
    try {
      tiny_config(m, t, extra);  // validation (model/config.cpp) or the trainer
      train(m, t, log);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_train_error({"--hybrid-layer-pattern", "-D"}, "not built yet");
  expect_train_error({"--hybrid-layer-pattern", "*-E"}, "--num-experts");
  // Megatron's Mamba defaults (head dim 64, 8 groups) do not fit a 32-wide model: 1 head.
  expect_train_error({"--hybrid-layer-pattern", "M*-"}, "--mamba-num-groups");
  expect_train_error({"--hybrid-layer-pattern", "M*-", "--mamba-head-dim", "48"}, "--mamba-head-dim");
}

TEST(Train, NonFiniteLossStopsWithAClearError) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t, {"--init-method-std", "1e30", "--train-iters", "3", "--lr-warmup-iters", "0"});
  std::ostringstream log;
  try {
    train(m, t, log);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    // Huge weights overflow in backward (the norms keep the forward finite).
    const std::string msg = e.what();
    EXPECT_NE(msg.find("iteration 1: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("is not finite"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the first parameter with a non-finite gradient: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("backward)"), std::string::npos) << msg;
  }
}

// --check-for-nan-in-loss-and-grad (on by default): an infinity injected into a weight of the second attention of
// `*-*-` (sub-layer 2) is named where it first shows, that sub-layer's output in the forward, and the report names
// the first parameter whose gradient is not finite. --no-check-for-nan-in-loss-and-grad trains on.
TEST(Train, NonFiniteStepNamesTheParameterAndTheLayer) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t, {"--train-iters", "3", "--lr-warmup-iters", "0"});
  t.after_init = [](ParamStore& store) {
    Param* p = store.find("decoder.layers.2.self_attention.linear_proj.weight");
    ASSERT_NE(p, nullptr);
    p->master.data<float>()[5] = INFINITY;
    store.sync_values_from_master();
  };
  std::ostringstream log;
  const std::string msg = test::error_of([&] { train(m, t, log); });
  EXPECT_NE(msg.find("iteration 1: loss is not finite"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the first parameter with a non-finite gradient: embedding.word_embeddings.weight"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("the first sub-layer to go non-finite: decoder.layers.2 (attention): its output in the pass "
                     "(micro-batch 0's forward)"),
            std::string::npos)
      << msg;
  t.check_for_nan_in_loss_and_grad = false;
  const TrainResult r = train(m, t, log);
  ASSERT_EQ(r.losses.size(), 3u);
  EXPECT_FALSE(std::isfinite(r.losses[0]));
}

TEST(Train, JsonlMetricsAndTheExampleConfig) {
  const std::string path = testing::TempDir() + "hytra_metrics.jsonl";
  std::remove(path.c_str());
  ModelConfig m;
  TrainConfig t;
  // The README's example must stay valid: parse it, then shrink the run.
  ASSERT_TRUE(parse_train_args({"--config", std::string(HYTRA_SOURCE_DIR) + "/examples/tiny-dense/config.yaml",
                                "--train-iters", "4", "--log-interval", "2", "--eval-interval", "4", "--eval-iters",
                                "1", "--lr-warmup-iters", "1", "--log-jsonl", path, "--device", "cpu"},
                               m, t, nullptr));
  EXPECT_EQ(m.hybrid_layer_pattern, "*-*-");
  std::ostringstream log;
  train(m, t, log);
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);  // iterations 2 and 4, then the validation at 4
  EXPECT_NE(lines[0].find("\"iteration\": 2"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"consumed_samples\": 64"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("validation"), std::string::npos) << lines[2];
}

// The Nemotron-H-like examples parse and build the stacks their comments describe.
TEST(Train, NemotronExamplesBuild) {
  struct Want {
    const char* file;
    int64_t mamba, attention, mlp;
    double params_min, params_max;
  };
  for (const Want& w : {Want{"examples/nemotron-h-tiny/config.yaml", 3, 1, 3, 6.0e6, 7.5e6},
                        Want{"examples/nemotron-h-1b/config.yaml", 11, 3, 11, 0.9e9, 1.0e9}}) {
    // The model keys as written; the corpus and tokenizer (fetched by scripts/setup.sh, absent in
    // a clean checkout) give way to mock data with GPT-2's vocabulary size.
    std::ifstream in(std::string(HYTRA_SOURCE_DIR) + "/" + w.file);
    ASSERT_TRUE(in.good()) << w.file;
    const std::string path = testing::TempDir() + "hytra_example.yaml";
    std::ofstream out(path);
    for (std::string line; std::getline(in, line);) {
      bool data = false;
      for (const char* key :
           {"data-path:", "split:", "tokenizer-type:", "vocab-file:", "merge-file:", "mock-data:", "vocab-size:"})
        data = data || line.rfind(key, 0) == 0;
      if (!data) out << line << "\n";
    }
    out << "mock-data: true\nvocab-size: 50257\n";
    out.close();
    ModelConfig m;
    TrainConfig t;
    ASSERT_TRUE(parse_train_args({"--config", path}, m, t, nullptr));
    m.validate();
    HybridModel model(m, plan_for(m));
    EXPECT_EQ(model.layer_counts().of('M'), w.mamba) << w.file;
    EXPECT_EQ(model.layer_counts().of('*'), w.attention) << w.file;
    EXPECT_EQ(model.layer_counts().of('-'), w.mlp) << w.file;
    const double n = double(model.params().num_elements());
    EXPECT_TRUE(n > w.params_min && n < w.params_max) << w.file << ": " << n << " parameters";
  }
}

TEST(Train, Bf16OnTheCpuIsANamedError) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t, {"--bf16", "--train-iters", "1"});
  std::ostringstream log;
  try {
    train(m, t, log);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--bf16"), std::string::npos) << e.what();
  }
}

TEST(Train, BenchMeasuresTheStepsAfterWarmup) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t);
  std::ostringstream log;
  BenchResult r = run_bench("tiny", m, t, 2, 3, log);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.global_batch, 8);
  EXPECT_GT(r.step_ms, 0.0);
  EXPECT_NEAR(r.tokens_per_s, 8.0 * 32.0 / (r.step_ms / 1e3), 1e-6 * r.tokens_per_s);
  EXPECT_NEAR(r.mfu, r.tflops_per_gpu * 1e12 / kPeakBf16Flops, 1e-12);
  EXPECT_NEAR(r.tflops_per_gpu, r.flops_per_token * r.tokens_per_s / 1e12, 1e-9);
  EXPECT_GT(r.peak_mem_gib, 0.0);  // the CPU allocator counts too
  const std::string line = format_bench_record(r);
  EXPECT_EQ(r.gpus, 1);
  for (const char* key : {"config=tiny", "gpus=1", "mbs=4", "gbs=8", "seq=32",
                          "step_ms=", "tokens_per_s=", "tflops_per_gpu=", "mfu=", "peak_mem_gib=", "loss="})
    EXPECT_NE(line.find(key), std::string::npos) << key << " in " << line;
}

// `hytra bench --skew-routing`: with expert 0's router bias raised every token routes one of its top-2 choices to
// expert 0 (the log's tokens_per_expert, a JSONL line a step); without it expert 0 gets fewer. A model without
// an expert bias is a named error.
TEST(Train, SkewRoutingSendsEveryTokenToExpertZero) {
  const std::vector<std::string> moe = {"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--moe-ffn-hidden-size",
                                        "32", "--moe-router-score-function", "sigmoid",
                                        "--moe-router-enable-expert-bias", "--train-iters", "5", "--log-interval",
                                        "1"};
  auto expert0_tokens = [&](bool skew) {
    const std::string path = testing::TempDir() + "hytra_skew.jsonl";
    std::remove(path.c_str());
    std::vector<std::string> extra = moe;
    extra.insert(extra.end(), {"--log-jsonl", path});
    ModelConfig m;
    TrainConfig t;
    tiny_config(m, t, extra);
    if (skew) t.after_init = skew_routing;
    std::ostringstream log;
    train(m, t, log);
    std::ifstream in(path);
    std::vector<int64_t> counts;
    for (std::string line; std::getline(in, line);) {
      const std::string key = "\"tokens_per_expert\": [";  // training lines (not the validation's)
      const size_t at = line.find(key);
      if (at != std::string::npos) counts.push_back(std::stoll(line.substr(at + key.size())));
    }
    return counts;
  };
  const int64_t tokens = 8 * 32;  // a step: global batch 8 x seq 32
  EXPECT_EQ(expert0_tokens(true), std::vector<int64_t>(5, tokens));
  const std::vector<int64_t> plain = expert0_tokens(false);
  EXPECT_EQ(plain.size(), 5u);
  for (int64_t c : plain) EXPECT_LT(c, tokens);
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t, {"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--moe-ffn-hidden-size", "32"});
  t.after_init = skew_routing;
  std::ostringstream log;
  try {
    train(m, t, log);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--skew-routing: the model has no router expert bias"), std::string::npos)
        << e.what();
  }
}

// Counts that overflow and a resumed run (which measured fewer iterations than warm-up + steps and
// met the result's internal check) are named errors.
TEST(Train, BenchRefusesBadCountsAndResuming) {
  ModelConfig m;
  TrainConfig t;
  tiny_config(m, t);
  std::ostringstream log;
  auto error_of = [&](int64_t warmup, int64_t steps) {
    try {
      run_bench("tiny", m, t, warmup, steps, log);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(-1, 1).find("--warmup: expected a count >= 0"), std::string::npos);
  EXPECT_NE(error_of(0, 0).find("--steps: expected a count >= 1"), std::string::npos);
  EXPECT_NE(error_of(INT64_MAX, 1).find("overflow"), std::string::npos);
  t.load = testing::TempDir() + "hytra_bench_ckpt";
  const std::string e = error_of(1, 1);
  EXPECT_NE(e.find("--load: bench measures a fresh run"), std::string::npos) << e;
  EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
}

// The dense `*-*-` stack, the M*G- hybrid and an MoE hybrid. fp32_tol bounds the fp32 GPU run's
// relative loss difference to the CPU run: rounding only (the GPU AdamW update is the CPU's bit for
// bit, so only the kernels' summation orders differ: 1.2e-7 to 2.2e-7 over 40 iterations), except
// that MoE routing is a discrete choice which a near-tie may resolve differently on the two devices
// (the expert bias then amplifies the count difference): seen once as 1.6e-3.
// Two runs with the same bits: every training loss, gradient norm and validation loss.
void expect_same_bits(const TrainResult& a, const TrainResult& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << what << " iteration " << i + 1;
    EXPECT_EQ(std::memcmp(&a.grad_norms[i], &b.grad_norms[i], sizeof(double)), 0) << what << " iteration " << i + 1;
  }
  ASSERT_EQ(a.val_losses.size(), b.val_losses.size()) << what;
  for (size_t i = 0; i < a.val_losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.val_losses[i], &b.val_losses[i], sizeof(double)), 0) << what << " validation " << i + 1;
}

void check_gpu_tracks_cpu(const std::vector<std::string>& model, double fp32_tol = 1e-5) {
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), model.begin(), model.end());
    return extra;
  };
  ModelConfig mc, mg, mb;
  TrainConfig tc, tg, tb;
  tiny_config(mc, tc, with({}));
  tiny_config(mg, tg, with({"--device", "cuda"}));
  tiny_config(mb, tb, with({"--device", "cuda", "--bf16"}));
  std::ostringstream log;
  const TrainResult cpu = train(mc, tc, log);
  const TrainResult gpu = train(mg, tg, log);
  const TrainResult bf1 = train(mb, tb, log);
  const TrainResult bf2 = train(mb, tb, log);
  double worst_fp32 = 0, worst_bf16 = 0;
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    worst_fp32 = std::max(worst_fp32, std::abs(gpu.losses[i] - cpu.losses[i]) / cpu.losses[i]);
    worst_bf16 = std::max(worst_bf16, std::abs(bf1.losses[i] - cpu.losses[i]) / cpu.losses[i]);
  }
  expect_same_bits(bf1, bf2, "two bf16 runs");
  std::printf("worst relative loss difference to the CPU run: fp32 %.3g, bf16 %.3g\n", worst_fp32, worst_bf16);
  EXPECT_LT(worst_fp32, fp32_tol);
  EXPECT_LT(worst_bf16, 2e-2);
  EXPECT_GT(bf1.losses.front() - bf1.losses.back(), 2.0);
}

TEST(TrainCuda, GpuRunsTrackTheCpuRunAndBf16IsBitwiseDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_gpu_tracks_cpu({});
}

TEST(TrainCuda, HybridGpuRunsTrackTheCpuRunAndBf16IsBitwiseDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_gpu_tracks_cpu(kHybrid);
}

TEST(TrainCuda, MlaGpuRunsTrackTheCpuRunAndBf16IsBitwiseDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_gpu_tracks_cpu(kMla);
}

TEST(TrainCuda, MoeGpuRunsTrackTheCpuRunAndBf16IsBitwiseDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_gpu_tracks_cpu({"--hybrid-layer-pattern",
                        "M*EE",
                        "--mamba-num-heads",
                        "4",
                        "--mamba-head-dim",
                        "16",
                        "--mamba-num-groups",
                        "2",
                        "--mamba-state-dim",
                        "16",
                        "--num-experts",
                        "8",
                        "--moe-ffn-hidden-size",
                        "32",
                        "--moe-router-topk",
                        "2",
                        "--moe-router-score-function",
                        "sigmoid",
                        "--moe-router-enable-expert-bias",
                        "--moe-router-dtype",
                        "fp32",
                        "--moe-aux-loss-coeff",
                        "1e-2",
                        "--moe-shared-expert-intermediate-size",
                        "32",
                        "--moe-shared-expert-gate",
                        "--moe-mlp-glu-interleave-size",
                        "8"},
                       1e-2);
}

TEST(TrainCuda, MhcMtpRecomputeGpuRunsTrackTheCpuRunAndBf16IsBitwiseDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_gpu_tracks_cpu({"--hybrid-layer-pattern", "M*-/*-", "--mamba-num-heads", "4", "--mamba-head-dim", "16",
                        "--mamba-num-groups", "2", "--mamba-state-dim", "16", "--enable-mhc-connections",
                        "--mhc-num-residual-streams", "4", "--recompute-granularity", "full", "--recompute-method",
                        "uniform", "--recompute-num-layers", "1"});
}

// CUDA graphs: every training micro-batch after the first is a replay (two micro-batches per step:
// both graph kinds), and the run is bitwise the eager (--no-cuda-graph) run: losses, gradient norms,
// validation losses. Dense; the hybrid with full recompute and delayed wgrad; mHC with selective
// recompute; MoE (device routing and dispatch, grouped expert GEMMs: nothing waits for the host inside a
// micro-batch, so the whole micro-batch is captured) with the expert bias, sequence aux loss, z-loss, a
// shared expert and delayed wgrad, whose per-step token counts and loss sums come from device
// accumulators (an expert bias fed wrong counts would route differently and change the losses); MoE with a
// capacity (drops by probability and by position) and padding (to the capacity, to a multiple), whose plan
// is built on the device with a static row count. MoE with global_aux_loss reads token counts on the host
// and runs eagerly.
TEST(TrainCuda, GraphReplaysAreBitwiseTheEagerRun) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  auto with_hybrid = [](std::vector<std::string> extra) {
    extra.insert(extra.begin(), kHybrid.begin(), kHybrid.end());
    return extra;
  };
  const std::vector<std::vector<std::string>> models = {
      {},
      {kHybrid.begin(), kHybrid.end()},
      with_hybrid({"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2",
                   "--delay-wgrad-compute"}),
      {"--enable-mhc-connections", "--mhc-num-residual-streams", "4", "--recompute-granularity", "selective",
       "--recompute-modules", "core_attn", "mhc"},
      {"--hybrid-layer-pattern", "*E*E", "--num-experts", "8", "--moe-ffn-hidden-size", "32", "--moe-router-topk", "2",
       "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias", "--moe-router-load-balancing-type",
       "seq_aux_loss", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3",
       "--moe-shared-expert-intermediate-size", "32", "--delay-wgrad-compute"},
      // Capacity and padding: the dispatch plan is built on the device too, unused rows and all.
      {"--hybrid-layer-pattern", "*E*E", "--num-experts", "8", "--moe-ffn-hidden-size", "32", "--moe-router-topk", "2",
       "--moe-expert-capacity-factor", "1.0", "--moe-pad-expert-input-to-capacity"},
      {"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--moe-ffn-hidden-size", "32",
       "--moe-expert-capacity-factor", "0.5", "--moe-token-drop-policy", "position",
       "--moe-router-padding-for-quantization"}};
  for (size_t k = 0; k < models.size(); ++k) {
    const std::vector<std::string>& model = models[k];
    std::vector<std::string> base = {"--device", "cuda", "--bf16"};
    base.insert(base.end(), model.begin(), model.end());
    std::vector<std::string> eager_args = base;
    eager_args.push_back("--no-cuda-graph");
    ModelConfig mg, me;
    TrainConfig tg, te;
    tiny_config(mg, tg, base);
    tiny_config(me, te, eager_args);
    std::ostringstream log;
    const TrainResult graph = train(mg, tg, log);
    const TrainResult eager = train(me, te, log);
    const std::string what = "model " + std::to_string(k);
    EXPECT_EQ(graph.graph_replays, 40 * 2 - 1) << what;
    EXPECT_EQ(eager.graph_replays, 0) << what;
    expect_same_bits(graph, eager, what);
    EXPECT_GT(graph.losses.front() - graph.losses.back(), 1.0) << what;
  }
  ModelConfig mm;
  TrainConfig tm;
  tiny_config(mm, tm,
              {"--device", "cuda", "--bf16", "--hybrid-layer-pattern", "*E", "--num-experts", "4",
               "--moe-ffn-hidden-size", "32", "--moe-router-load-balancing-type", "global_aux_loss",
               "--moe-aux-loss-coeff", "1e-2", "--train-iters", "3", "--lr-warmup-iters", "1", "--eval-interval", "0"});
  std::ostringstream log;
  EXPECT_EQ(train(mm, tm, log).graph_replays, 0);
  EXPECT_NE(log.str().find("CUDA graphs off: global_aux_loss"), std::string::npos) << log.str();
}

// Both expert weight layouts feed the grouped GEMMs as one (E, out, in) tensor without copies: per-expert
// tensors (consecutive in the parameter buffer) and the single grouped tensor start from the same values
// and train to the same bits on the GPU.
TEST(TrainCuda, MoeWeightLayoutsTrainBitwiseAlike) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const std::vector<std::string> moe = {"--device", "cuda", "--bf16", "--hybrid-layer-pattern", "*E*E", "--num-experts",
                                        "8", "--moe-ffn-hidden-size", "32", "--moe-router-topk", "3",
                                        "--moe-aux-loss-coeff", "1e-2", "--train-iters", "10", "--eval-interval", "0"};
  std::vector<std::string> grouped = moe;
  grouped.push_back("--moe-single-grouped-weight");
  ModelConfig mi, mg;
  TrainConfig ti, tg;
  tiny_config(mi, ti, moe);
  tiny_config(mg, tg, grouped);
  std::ostringstream log;
  const TrainResult indexed = train(mi, ti, log), single = train(mg, tg, log);
  expect_same_bits(indexed, single, "indexed vs single grouped weight");
  EXPECT_GT(indexed.graph_replays, 0);  // captured as CUDA graphs, both
  EXPECT_GT(single.graph_replays, 0);
}

TEST(TrainCuda, RecomputeIsBitwiseIdenticalInBf16) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_recompute_is_bitwise({"--device", "cuda", "--bf16"});
}

}  // namespace
}  // namespace hytra
