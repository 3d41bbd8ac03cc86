// Checkpoints: a run stopped with --exit-interval and resumed with --load continues bit for bit
// (losses, gradient norms, validation); the directory layout, --ckpt-keep, corruption detection,
// --finetune and --no-load-optim; with a GPU, bf16 resume on the GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/float_decode.h"
#include "checkpoint/safetensors.h"
#include "cli/eval_step.h"
#include "cli/flags.h"
#include "common/error_of.h"
#include "core/device.h"
#include "core/error.h"
#include "train/trainer.h"

namespace hytra {
namespace {
namespace fs = std::filesystem;

TrainResult run(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--hybrid-layer-pattern", "[*-]*-", "--hidden-size", "32", "--num-attention-heads",
                                   "4", "--ffn-hidden-size", "64", "--normalization", "RMSNorm",
                                   "--position-embedding-type", "rope", "--vocab-size", "96",
                                   "--make-vocab-size-divisible-by", "32", "--seq-length", "16", "--micro-batch-size",
                                   "2", "--global-batch-size", "4", "--train-iters", "12", "--lr", "1e-2",
                                   "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--eval-interval", "4",
                                   "--eval-iters", "1", "--log-interval", "4", "--mock-data", "--device", "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  ModelConfig m;
  TrainConfig t;
  EXPECT_TRUE(parse_train_args(args, m, t, nullptr));
  std::ostringstream log;
  return train(m, t, log);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

using test::error_of;

TEST(Checkpoint, ResumeIsBitwiseIdentical) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_resume";
  fs::remove_all(dir);
  const TrainResult full = run({});
  const TrainResult first = run({"--save", dir, "--exit-interval", "6", "--save-interval", "2", "--ckpt-keep", "2"});
  const TrainResult second = run({"--load", dir, "--save", dir, "--ckpt-keep", "2"});
  ASSERT_EQ(full.losses.size(), 12u);
  ASSERT_EQ(first.losses.size(), 6u);
  ASSERT_EQ(second.losses.size(), 6u);
  for (size_t i = 0; i < 12; ++i) {
    const TrainResult& part = i < 6 ? first : second;
    EXPECT_TRUE(same_bits(full.losses[i], part.losses[i % 6])) << "iteration " << i + 1;
    EXPECT_TRUE(same_bits(full.grad_norms[i], part.grad_norms[i % 6])) << "iteration " << i + 1;
  }
  ASSERT_EQ(full.val_losses.size(), 3u);  // iterations 4, 8, 12
  EXPECT_TRUE(same_bits(full.val_losses[0], first.val_losses[0]));
  EXPECT_TRUE(same_bits(full.val_losses[1], second.val_losses[0]));
  EXPECT_TRUE(same_bits(full.val_losses[2], second.val_losses[1]));
  // Layout: the newest two of iter 2/4/6/12 remain, and latest points at 12.
  EXPECT_FALSE(fs::exists(dir + "/iter_0000004"));
  EXPECT_TRUE(fs::exists(dir + "/iter_0000006/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/iter_0000012/optimizer.safetensors"));
  std::ifstream latest(dir + "/latest_checkpointed_iteration.txt");
  int64_t it = 0;
  latest >> it;
  EXPECT_EQ(it, 12);
  SafetensorsFile model(dir + "/iter_0000012/model.safetensors");
  EXPECT_NE(model.find("decoder.layers.0.mlp.linear_fc1.weight"), nullptr);  // [*-] keyed as one layer
  EXPECT_NE(model.find("decoder.final_layernorm.weight"), nullptr);
  EXPECT_EQ(model.metadata().at("format"), "pt");
}

// On the GPU in bf16 (fp32 master weights in the checkpoint, bf16 values rebuilt from them; CUDA
// graphs captured anew after the restart): the resumed run is bitwise the uninterrupted one.
TEST(CheckpointCuda, Bf16ResumeIsBitwiseIdentical) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const std::string dir = testing::TempDir() + "hytra_ckpt_resume_bf16";
  fs::remove_all(dir);
  const std::vector<std::string> gpu = {"--device", "cuda", "--bf16"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), gpu.begin(), gpu.end());
    return extra;
  };
  const TrainResult full = run(gpu);
  const TrainResult first = run(with({"--save", dir, "--exit-interval", "6"}));
  const TrainResult second = run(with({"--load", dir}));
  ASSERT_EQ(full.losses.size(), 12u);
  ASSERT_EQ(first.losses.size(), 6u);
  ASSERT_EQ(second.losses.size(), 6u);
  EXPECT_GT(second.graph_replays, 0);
  for (size_t i = 0; i < 12; ++i) {
    const TrainResult& part = i < 6 ? first : second;
    EXPECT_TRUE(same_bits(full.losses[i], part.losses[i % 6])) << "iteration " << i + 1;
    EXPECT_TRUE(same_bits(full.grad_norms[i], part.grad_norms[i % 6])) << "iteration " << i + 1;
  }
  fs::remove_all(dir);
}

// Experts saved per expert (weight<e>, bias<e>) resume bit for bit in the single grouped layout
// ([E, out, in] weight, [E, out] bias) and back, optimizer moments and the expert bias included.
TEST(Checkpoint, MoeResumesAcrossExpertLayouts) {
  const std::vector<std::string> moe = {"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--moe-ffn-hidden-size",
                                        "16", "--moe-router-score-function", "sigmoid",
                                        "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "1e-2",
                                        "--ckpt-strictness", "raise_all"};
  const std::vector<std::string> grouped = {"--moe-single-grouped-weight", "--moe-single-grouped-bias"};
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& b = {}) {
    a.insert(a.begin(), moe.begin(), moe.end());
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const TrainResult full = run(with({}));
  for (bool save_grouped : {false, true}) {
    const std::string dir = testing::TempDir() + "hytra_ckpt_moe";
    fs::remove_all(dir);
    const TrainResult first =
        run(with({"--save", dir, "--exit-interval", "6"}, save_grouped ? grouped : std::vector<std::string>{}));
    const TrainResult second = run(with({"--load", dir}, save_grouped ? std::vector<std::string>{} : grouped));
    ASSERT_EQ(second.losses.size(), 6u);
    for (size_t i = 0; i < 12; ++i) {
      const TrainResult& part = i < 6 ? first : second;
      EXPECT_TRUE(same_bits(full.losses[i], part.losses[i % 6])) << "iteration " << i + 1 << " grouped " << save_grouped;
      EXPECT_TRUE(same_bits(full.grad_norms[i], part.grad_norms[i % 6])) << "iteration " << i + 1;
    }
    SafetensorsFile model(dir + "/iter_0000006/model.safetensors");
    const std::string fc1 = "decoder.layers.1.mlp.experts.linear_fc1.";
    EXPECT_NE(model.find(save_grouped ? fc1 + "weight" : fc1 + "weight3"), nullptr);
    EXPECT_NE(model.find(save_grouped ? fc1 + "bias" : fc1 + "bias3"), nullptr);
    EXPECT_NE(model.find("decoder.layers.1.mlp.router.expert_bias"), nullptr);
  }
}

TEST(Checkpoint, CorruptionFinetuneAndFreshOptimizer) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_misc";
  fs::remove_all(dir);
  run({"--save", dir, "--exit-interval", "4"});
  // --finetune: weights only, training restarts at iteration 1.
  EXPECT_EQ(run({"--load", dir, "--finetune", "--train-iters", "2", "--lr-warmup-iters", "0"}).losses.size(), 2u);
  // --no-load-optim: resumes at iteration 5 with fresh moments, so it diverges from a full resume.
  const TrainResult fresh = run({"--load", dir, "--no-load-optim"});
  const TrainResult resumed = run({"--load", dir});
  ASSERT_EQ(fresh.losses.size(), 8u);
  EXPECT_TRUE(same_bits(fresh.losses[0], resumed.losses[0]));  // same weights, same first batch
  EXPECT_FALSE(same_bits(fresh.losses[1], resumed.losses[1]));
  // A flipped byte is caught by the manifest checksum.
  const std::string file = dir + "/iter_0000004/model.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  try {
    run({"--load", dir});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum differs"), std::string::npos) << e.what();
  }
  // Iteration directories without the tracker: which one to load is unknown.
  const std::string untracked = testing::TempDir() + "hytra_untracked_ckpt";
  fs::remove_all(untracked);
  fs::create_directories(untracked + "/iter_0000004");
  try {
    run({"--load", untracked});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, LoadOfANewSaveDirectoryTrainsFromTheStart) {
  // A resumable job's first start (--save DIR --load DIR): nothing to load yet, as Megatron; an empty directory or
  // none at all. The run is the plain run's, and the next start resumes from what it saved.
  const std::string dir = testing::TempDir() + "hytra_first_start";
  fs::remove_all(dir);
  const TrainResult plain = run({"--train-iters", "4"});
  const TrainResult first = run({"--train-iters", "4", "--save", dir, "--load", dir});
  EXPECT_EQ(first.losses, plain.losses);
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_EQ(run({"--train-iters", "4", "--save", dir, "--load", dir}).losses, plain.losses);
  const TrainResult resumed = run({"--train-iters", "6", "--save", dir, "--load", dir});
  EXPECT_EQ(resumed.losses.size(), 2u);  // iterations 5 and 6
}

TEST(Checkpoint, FinalNormLoadsAsFinalLayernorm) {
  // `*-` saves decoder.final_norm.weight; `[*]-` (same layer keys, a group) wants final_layernorm.
  const std::string dir = testing::TempDir() + "hytra_ckpt_alias";
  fs::remove_all(dir);
  run({"--hybrid-layer-pattern", "*-", "--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0"});
  SafetensorsFile saved(dir + "/iter_0000002/model.safetensors");
  ASSERT_NE(saved.find("decoder.final_norm.weight"), nullptr);
  const TrainResult r = run({"--hybrid-layer-pattern", "[*]-", "--load", dir, "--finetune", "--train-iters", "1",
                             "--lr-warmup-iters", "0", "--ckpt-strictness", "raise_all"});
  EXPECT_EQ(r.losses.size(), 1u);
  try {  // a different model: the recorded architecture names the difference
    run({"--hybrid-layer-pattern", "-*", "--load", dir, "--finetune", "--train-iters", "1", "--lr-warmup-iters", "0",
         "--ckpt-strictness", "raise_all"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer pattern"), std::string::npos) << e.what();
  }
  // Without the record (a checkpoint of an older hytra) the key check still lists missing and
  // unexpected keys.
  const std::string manifest = dir + "/iter_0000002/manifest.json";
  write_text(manifest, std::regex_replace(read_text(manifest), std::regex("\"model\": \\{[^}]*\\},\n  "), ""));
  try {
    run({"--hybrid-layer-pattern", "-*", "--load", dir, "--finetune", "--train-iters", "1", "--lr-warmup-iters", "0",
         "--ckpt-strictness", "raise_all"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing keys"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unexpected keys"), std::string::npos) << e.what();
  }
}

// docs/spec/names.md §3 interop: a GPT checkpoint (attention and MLP of layer i under one index) fills an
// ungrouped hybrid model, the i-th `*` from GPT layer i's attention, the i-th `-` from its MLP.
TEST(Checkpoint, GptCheckpointFillsAnUngroupedHybridModel) {
  const std::string gpt = testing::TempDir() + "hytra_ckpt_gpt", hyb = testing::TempDir() + "hytra_ckpt_hyb";
  fs::remove_all(gpt);
  fs::remove_all(hyb);
  run({"--hybrid-layer-pattern", "", "--num-layers", "2", "--save", gpt, "--train-iters", "1", "--lr-warmup-iters", "0"});
  // Load into `*-*-` and save again without changing the weights (lr 0).
  run({"--hybrid-layer-pattern", "*-*-", "--load", gpt, "--finetune", "--ckpt-strictness", "raise_all", "--lr", "0",
       "--train-iters", "1", "--lr-warmup-iters", "0", "--save", hyb});
  SafetensorsFile a(gpt + "/iter_0000001/model.safetensors"), b(hyb + "/iter_0000001/model.safetensors");
  auto same = [&](const std::string& ka, const std::string& kb) {
    const SafetensorsEntry *ea = a.find(ka), *eb = b.find(kb);
    return ea && eb && ea->end - ea->begin == eb->end - eb->begin &&
           std::memcmp(a.data(*ea), b.data(*eb), size_t(ea->end - ea->begin)) == 0;
  };
  EXPECT_TRUE(same("decoder.layers.1.self_attention.linear_qkv.weight", "decoder.layers.2.self_attention.linear_qkv.weight"));
  EXPECT_TRUE(same("decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.1.mlp.linear_fc1.weight"));
  EXPECT_TRUE(same("decoder.layers.1.mlp.linear_fc2.weight", "decoder.layers.3.mlp.linear_fc2.weight"));
  EXPECT_TRUE(same("decoder.final_layernorm.weight", "decoder.final_norm.weight"));
  // Layer counts must agree.
  EXPECT_THROW(run({"--hybrid-layer-pattern", "*-*-*", "--load", gpt, "--finetune", "--train-iters", "1",
                    "--lr-warmup-iters", "0"}),
               Error);
}

std::vector<SafetensorsTensor> tensors_of(const std::string& path);

// docs/spec/names.md: a `[*E][*E]` checkpoint (GPT MoE layers: the pre-MLP norm belongs to the MoE) fills `*E*E`,
// and back, under strict loading; Megatron's other spellings load as hytra's names (sequential experts, a group's
// nested local keys, the MTP inner layer's `transformer_layer`), and so do bf16 and fp16 tensors.
TEST(Checkpoint, GroupedLayersAndMegatronSpellingsLoadStrictly) {
  const std::string base = testing::TempDir() + "hytra_ckpt_spell_";
  for (const char* d : {"a", "b", "c", "d", "e", "f", "g"}) fs::remove_all(base + d);
  const std::vector<std::string> moe = {"--num-experts",     "4", "--moe-ffn-hidden-size", "32",
                                        "--moe-router-topk", "2", "--lr-warmup-iters",     "0",
                                        "--eval-iters",      "0"};
  auto train_as = [&](const std::string& pattern, const std::vector<std::string>& extra) {
    std::vector<std::string> args = moe;
    args.insert(args.end(), {"--hybrid-layer-pattern", pattern});
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  // Loads `from` into `pattern` strictly and saves the unchanged weights (lr 0) into `to`.
  auto reload = [&](const std::string& pattern, const std::string& from, const std::string& to) {
    train_as(pattern, {"--load", from, "--finetune", "--ckpt-strictness", "raise_all", "--lr", "0", "--train-iters",
                       "1", "--save", to});
  };
  const std::string grouped = "[*E][*E]/*E", flat = "*E*E/*E";
  train_as(grouped, {"--train-iters", "3", "--save", base + "a"});
  const std::string a_file = base + "a/iter_0000003/model.safetensors";
  reload(flat, base + "a", base + "b");
  SafetensorsFile a(a_file), b(base + "b/iter_0000001/model.safetensors");
  auto bytes = [](const SafetensorsFile& f, const std::string& k) {
    const SafetensorsEntry* e = f.find(k);
    EXPECT_NE(e, nullptr) << k;
    return e ? std::string(reinterpret_cast<const char*>(f.data(*e)), size_t(e->end - e->begin)) : std::string();
  };
  // The two MoE norms trained apart, so each must land in its own layer.
  ASSERT_NE(bytes(a, "decoder.layers.0.pre_mlp_layernorm.weight"),
            bytes(a, "decoder.layers.1.pre_mlp_layernorm.weight"));
  EXPECT_EQ(bytes(a, "decoder.layers.0.pre_mlp_layernorm.weight"),
            bytes(b, "decoder.layers.1.pre_mlp_layernorm.weight"));
  EXPECT_EQ(bytes(a, "decoder.layers.1.pre_mlp_layernorm.weight"),
            bytes(b, "decoder.layers.3.pre_mlp_layernorm.weight"));
  EXPECT_EQ(bytes(a, "decoder.layers.1.self_attention.linear_qkv.weight"),
            bytes(b, "decoder.layers.2.self_attention.linear_qkv.weight"));
  EXPECT_EQ(bytes(a, "decoder.layers.1.mlp.experts.linear_fc1.weight3"),
            bytes(b, "decoder.layers.3.mlp.experts.linear_fc1.weight3"));
  EXPECT_EQ(bytes(a, "decoder.layers.0.mlp.router.weight"), bytes(b, "decoder.layers.1.mlp.router.weight"));
  // And back: the same file as the first.
  reload(grouped, base + "b", base + "c");
  EXPECT_EQ(read_text(base + "c/iter_0000001/model.safetensors"), read_text(a_file));

  // Megatron's spellings of the same tensors (a checkpoint written with them, its manifest vouching for them).
  auto rewritten = [&](const std::string& dir, const std::function<void(SafetensorsTensor&)>& change) {
    CheckpointContents c;
    c.manifest = read_manifest(base + "a/iter_0000003");
    c.model = tensors_of(a_file);
    for (SafetensorsTensor& t : c.model) change(t);
    save_checkpoint(dir, c);
  };
  rewritten(base + "d", [](SafetensorsTensor& t) {
    std::smatch m;
    const std::string k = t.name;
    if (std::regex_match(k, m, std::regex(R"(decoder\.layers\.([0-9])\.(self_attention\..*))")))
      t.name = "decoder.layers." + m[1].str() + ".layers.0." + m[2].str();
    else if (std::regex_match(k, m, std::regex(R"(decoder\.layers\.([0-9])\.((pre_mlp_layernorm|mlp)\..*))")))
      t.name = "decoder.layers." + m[1].str() + ".layers.1." + m[2].str();
    else if (std::regex_match(k, m, std::regex(R"(mtp\.layers\.0\.mtp_model_layer\.layers\.[01]\.(.*))")))
      t.name = "mtp.layers.0.transformer_layer." + m[1].str();
    if (std::regex_match(t.name, m, std::regex(R"((.*)\.mlp\.experts\.(linear_fc[12])\.weight([0-9]+))")))
      t.name = m[1].str() + ".mlp.experts.local_experts." + m[3].str() + "." + m[2].str() + ".weight";
  });
  {
    SafetensorsFile d(base + "d/iter_0000003/model.safetensors");
    ASSERT_NE(d.find("decoder.layers.1.layers.1.mlp.experts.local_experts.2.linear_fc2.weight"), nullptr);
    ASSERT_NE(d.find("mtp.layers.0.transformer_layer.pre_mlp_layernorm.weight"), nullptr);
  }
  reload(grouped, base + "d", base + "e");
  EXPECT_EQ(read_text(base + "e/iter_0000001/model.safetensors"), read_text(a_file));

  // bf16 and fp16 tensors load as the fp32 values they hold.
  auto narrowed = [&](const std::string& dtype) {
    return [dtype](SafetensorsTensor& t) {
      std::vector<unsigned char> out(t.bytes.size() / 2);
      for (size_t i = 0; i < out.size() / 2; ++i) {
        float v;
        std::memcpy(&v, t.bytes.data() + 4 * i, 4);
        uint32_t u;
        std::memcpy(&u, &v, 4);
        // fp16 by truncation, values below its normal range as +0 (an update by lr 0 may turn -0 into +0)
        const int32_t e = int32_t((u >> 23) & 0xff) - 112;
        const uint16_t h = dtype == "BF16" ? float_to_bf16(v).bits
                           : e <= 0        ? uint16_t(0)
                                    : uint16_t(((u >> 16) & 0x8000u) | (uint32_t(e) << 10) | ((u >> 13) & 0x3ffu));
        out[2 * i] = uint8_t(h & 0xff);
        out[2 * i + 1] = uint8_t(h >> 8);
      }
      t.dtype = dtype;
      t.bytes = std::move(out);
    };
  };
  for (const auto& [dtype, dir] : {std::pair<std::string, std::string>{"BF16", "f"}, {"F16", "g"}}) {
    rewritten(base + dir, narrowed(dtype));
    reload(grouped, base + dir, base + dir + "_saved");
    SafetensorsFile src(base + dir + "/iter_0000003/model.safetensors"),
        got(base + dir + "_saved/iter_0000001/model.safetensors");
    for (const SafetensorsEntry& e : src.entries()) {
      const SafetensorsEntry* g = got.find(e.name);
      ASSERT_NE(g, nullptr) << e.name;
      std::vector<float> want(size_t((e.end - e.begin) / 2));
      decode_f32(dtype, src.data(e), int64_t(want.size()), want.data());
      ASSERT_EQ(g->end - g->begin, int64_t(want.size() * 4)) << e.name;
      EXPECT_EQ(std::memcmp(got.data(*g), want.data(), want.size() * 4), 0) << dtype << " " << e.name;
    }
    fs::remove_all(base + dir + "_saved");
  }
}

// fp16 decoding covers every class of value exactly.
TEST(Checkpoint, HalfDecodesExactly) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));     // the smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // the largest
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));     // the smallest normal
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)) && half_to_float(0x8000) == 0.0f);
  EXPECT_EQ(half_to_float(0x7c00), INFINITY);
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  const unsigned char inf_bf16[] = {0x80, 0x7f}, one_bf16[] = {0x80, 0x3f};
  EXPECT_FALSE(all_finite("BF16", inf_bf16, 1));
  EXPECT_TRUE(all_finite("BF16", one_bf16, 1));
}

TEST(Checkpoint, EvalStepWritesLossesAndEveryGradient) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_eval";
  fs::remove_all(dir);
  run({"--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0"});
  const std::string batch = testing::TempDir() + "hytra_eval_batch.safetensors", out = testing::TempDir() + "hytra_eval_out.safetensors";
  std::vector<int32_t> tokens(2 * 9);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7) % 96);
  SafetensorsTensor t{"tokens", "I32", {2, 9}, std::vector<unsigned char>(tokens.size() * 4)};
  std::memcpy(t.bytes.data(), tokens.data(), t.bytes.size());
  write_safetensors(batch, {t}, {});
  ModelConfig m;
  TrainConfig tc;
  ASSERT_TRUE(parse_train_args({"--hybrid-layer-pattern", "[*-]*-", "--hidden-size", "32", "--num-attention-heads", "4",
                                "--ffn-hidden-size", "64", "--normalization", "RMSNorm", "--position-embedding-type",
                                "rope", "--vocab-size", "96", "--make-vocab-size-divisible-by", "32", "--seq-length",
                                "16", "--micro-batch-size", "2", "--train-iters", "1", "--lr", "1", "--mock-data",
                                "--device", "cpu", "--load", dir},
                               m, tc, nullptr));
  eval_step(m, tc, batch, out);
  {  // token ids outside the vocabulary are refused, not wrapped (2^32 + 5 is not 5)
    const std::string bad = testing::TempDir() + "hytra_eval_bad.safetensors";
    for (int64_t id : {(int64_t(1) << 32) + 5, int64_t(96), int64_t(-1)}) {
      std::vector<int64_t> wide(tokens.begin(), tokens.end());
      wide[3] = id;
      SafetensorsTensor w{"tokens", "I64", {2, 9}, std::vector<unsigned char>(wide.size() * 8)};
      std::memcpy(w.bytes.data(), wide.data(), w.bytes.size());
      write_safetensors(bad, {w}, {});
      const std::string e = error_of([&] { eval_step(m, tc, bad, out); });
      EXPECT_NE(e.find("'tokens' element 3 is " + std::to_string(id) + ", expected a token id in [0, 96)"),
                std::string::npos)
          << e;
    }
  }
  SafetensorsFile r(out);
  const SafetensorsEntry* losses = r.find("losses");
  ASSERT_NE(losses, nullptr);
  EXPECT_EQ(losses->shape, (std::vector<int64_t>{2, 8}));
  std::vector<float> l(16);
  std::memcpy(l.data(), r.data(*losses), 64);
  float mean = 0, loss = 0;
  for (float x : l) mean += x / 16;
  std::memcpy(&loss, r.data(*r.find("loss")), 4);
  EXPECT_NEAR(loss, mean, 1e-5);
  // The logits (the vocabulary's 96 columns): their cross-entropy at each label is the token's loss.
  const SafetensorsEntry* logits = r.find("logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{2, 8, 96}));
  std::vector<float> z(2 * 8 * 96);
  std::memcpy(z.data(), r.data(*logits), z.size() * 4);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 8; ++t) {
      const float* row = z.data() + (b * 8 + t) * 96;
      double mx = row[0], sum = 0;
      for (int v = 0; v < 96; ++v) mx = std::max(mx, double(row[v]));
      for (int v = 0; v < 96; ++v) sum += std::exp(double(row[v]) - mx);
      const int label = tokens[size_t(b * 9 + t + 1)];
      EXPECT_NEAR(std::log(sum) + mx - row[label], l[size_t(b * 8 + t)], 1e-5) << b << " " << t;
    }
  SafetensorsFile saved(dir + "/iter_0000002/model.safetensors");
  for (const auto& e : saved.entries()) {  // one gradient per parameter, same shape, not all zero
    const SafetensorsEntry* g = r.find(e.name);
    ASSERT_NE(g, nullptr) << e.name;
    EXPECT_EQ(g->shape, e.shape) << e.name;
    std::vector<float> v(size_t(g->end - g->begin) / 4);
    std::memcpy(v.data(), r.data(*g), v.size() * 4);
    EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f; })) << e.name;
  }
}

// Batches the model cannot take are named errors: empty ones (they read as "no label is a target"),
// sequences longer than the learned positions (an embedding index error), a directory.
TEST(Checkpoint, EvalStepRefusesBatchesTheModelCannotTake) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_eval_learned";
  fs::remove_all(dir);
  run({"--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0", "--position-embedding-type", "learned_absolute"});
  ModelConfig m;
  TrainConfig tc;
  ASSERT_TRUE(parse_train_args({"--hybrid-layer-pattern", "[*-]*-", "--hidden-size", "32", "--num-attention-heads", "4",
                                "--ffn-hidden-size", "64", "--normalization", "RMSNorm", "--vocab-size", "96",
                                "--make-vocab-size-divisible-by", "32", "--seq-length", "16", "--micro-batch-size", "2",
                                "--train-iters", "1", "--lr", "1", "--mock-data", "--device", "cpu", "--load", dir},
                               m, tc, nullptr));
  const std::string batch = testing::TempDir() + "hytra_eval_shape.safetensors";
  const std::string out = testing::TempDir() + "hytra_eval_shape_out.safetensors";
  auto eval_tokens = [&](int64_t rows, int64_t cols) {
    SafetensorsTensor t{"tokens", "I32", {rows, cols}, std::vector<unsigned char>(size_t(rows * cols) * 4, 0)};
    write_safetensors(batch, {t}, {});
    return error_of([&] { eval_step(m, tc, batch, out); });
  };
  EXPECT_NE(eval_tokens(0, 9).find("the batch is empty ([0, 8])"), std::string::npos);
  EXPECT_NE(eval_tokens(1, 18).find("sequences of 17 tokens exceed the 16 learned positions"), std::string::npos);
  EXPECT_NE(error_of([&] { eval_step(m, tc, dir, out); }).find(dir + ": not a regular file"), std::string::npos);
  SafetensorsTensor fits{"tokens", "I32", {1, 17}, std::vector<unsigned char>(17 * 4, 0)};
  write_safetensors(batch, {fits}, {});
  eval_step(m, tc, batch, out);
}

// Megatron GPTModel naming (plain transformer layers, final_layernorm) and a hybrid model of `[*-]`
// groups load each other's checkpoints and give the same loss on the same batch.
TEST(Checkpoint, GptNamingAndGroupedHybridGiveTheSameLoss) {
  const std::string batch = testing::TempDir() + "hytra_gpt_batch.safetensors";
  std::vector<int32_t> tokens(2 * 9);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 11 + 3) % 96);
  SafetensorsTensor t{"tokens", "I32", {2, 9}, std::vector<unsigned char>(tokens.size() * 4)};
  std::memcpy(t.bytes.data(), tokens.data(), t.bytes.size());
  write_safetensors(batch, {t}, {});
  auto loss_of = [&](const std::vector<std::string>& model_flags, const std::string& ckpt) {
    std::vector<std::string> args = {"--hidden-size", "32", "--num-attention-heads", "4", "--ffn-hidden-size", "64",
                                     "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                                     "--vocab-size", "96", "--make-vocab-size-divisible-by", "32", "--seq-length",
                                     "16", "--micro-batch-size", "2", "--train-iters", "1", "--lr", "1",
                                     "--mock-data", "--device", "cpu", "--load", ckpt, "--ckpt-strictness",
                                     "raise_all"};
    args.insert(args.end(), model_flags.begin(), model_flags.end());
    ModelConfig m;
    TrainConfig tc;
    EXPECT_TRUE(parse_train_args(args, m, tc, nullptr));
    const std::string out = testing::TempDir() + "hytra_gpt_out.safetensors";
    eval_step(m, tc, batch, out);
    SafetensorsFile r(out);
    float loss;
    std::memcpy(&loss, r.data(*r.find("loss")), 4);
    return loss;
  };
  const std::vector<std::string> gpt = {"--hybrid-layer-pattern", "", "--num-layers", "2"};
  const std::vector<std::string> grouped = {"--hybrid-layer-pattern", "[*-][*-]"};
  for (const auto* saver : {&gpt, &grouped}) {
    const std::string dir = testing::TempDir() + "hytra_ckpt_naming";
    fs::remove_all(dir);
    std::vector<std::string> flags = *saver;
    flags.insert(flags.end(), {"--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0"});
    run(flags);
    SafetensorsFile saved(dir + "/iter_0000002/model.safetensors");
    EXPECT_NE(saved.find("decoder.layers.1.mlp.linear_fc2.weight"), nullptr);  // GPT layer keys
    EXPECT_NE(saved.find("decoder.final_layernorm.weight"), nullptr);
    EXPECT_EQ(loss_of(gpt, dir), loss_of(grouped, dir));
  }
}

// Kill -9 at arbitrary moments of saving: the latest checkpoint stays loadable and complete.
TEST(Checkpoint, KillDuringSaveLeavesALoadableCheckpoint) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_kill";
  fs::remove_all(dir);
  // The hytra binary sits next to the tests directory of the build.
  const std::string hytra = (fs::canonical("/proc/self/exe").parent_path().parent_path() / "hytra").string();
  if (!fs::exists(hytra)) GTEST_SKIP() << "no hytra binary at " << hytra;
  run({"--hybrid-layer-pattern", "*-", "--save", dir, "--train-iters", "1", "--lr-warmup-iters", "0"});  // a first good one
  int64_t newest = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the child (a fresh hytra process) saves every iteration until it is killed
      execl(hytra.c_str(), hytra.c_str(), "train", "--hybrid-layer-pattern", "*-", "--hidden-size", "32",
            "--num-attention-heads", "4", "--ffn-hidden-size", "64", "--vocab-size", "96", "--seq-length", "16",
            "--micro-batch-size", "2", "--train-iters", "100000", "--lr", "1e-3", "--eval-interval", "0",
            "--log-interval", "1000", "--mock-data", "--device", "cpu", "--save", dir.c_str(), "--save-interval",
            "1", static_cast<char*>(nullptr));
      _exit(127);
    }
    // Wait (up to 20 s, for loaded machines) until the child has completed a save, then let it run
    // a few more milliseconds: the kill lands at different moments of its save loop.
    const auto latest_iteration = [&] {
      std::ifstream f(dir + "/latest_checkpointed_iteration.txt");
      int64_t it = 0;
      f >> it;
      return it;
    };
    for (int waited = 0; waited < 2000 && latest_iteration() <= 1; ++waited) usleep(10000);
    usleep(useconds_t(3000 + 7000 * trial));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    const std::string latest = resolve_checkpoint_dir(dir);
    const CheckpointManifest m = read_manifest(latest);  // sizes and checksums verified
    EXPECT_GE(m.iteration, 1);
    newest = std::max(newest, m.iteration);
    SafetensorsFile model(latest + "/model.safetensors");  // fully validated
    EXPECT_GT(model.entries().size(), 0u);
  }
  EXPECT_GT(newest, 1) << "the killed runs never completed a save: the test did not exercise saving";
}


// The manifest records the resolved model; --load refuses a model whose weights would mean something
// else, even where every tensor shape matches (Megatron's check_checkpoint_args).
TEST(Checkpoint, LoadRefusesAnotherArchitecture) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_arch";
  fs::remove_all(dir);
  const std::vector<std::string> base = {"--hybrid-layer-pattern", "*-*-*-", "--untie-embeddings-and-output-weights",
                                         "--train-iters", "4", "--lr-warmup-iters", "0"};
  auto with = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  run(with({"--save", dir, "--exit-interval", "2"}));
  const std::vector<std::pair<std::vector<std::string>, std::string>> differences = {
      {{"--hybrid-layer-pattern", "*-*-"}, "layer pattern"},                                 // 6 layers into 4
      {{"--num-attention-heads", "8", "--kv-channels", "4"}, "--num-attention-heads"},        // same QKV shape
      {{"--squared-relu"}, "checkpoint gelu, this run squared_relu"},          // same MLP shapes
      {{"--vocab-size", "90"}, "--vocab-size: checkpoint 96, this run 90"},                  // both padded to 96
      {{"--untie-embeddings-and-output-weights=false"}, "--untie-embeddings-and-output-weights"},
  };
  for (const auto& [flags, needle] : differences) {
    for (const char* finetune : {"--finetune=false", "--finetune"}) {
      std::vector<std::string> load = {"--load", dir, finetune};
      load.insert(load.end(), flags.begin(), flags.end());
      const std::string e = error_of([&] { run(with(load)); });
      EXPECT_NE(e.find(needle), std::string::npos) << e;
      EXPECT_NE(e.find("what its weights mean"), std::string::npos) << e;
    }
  }
  // Other settings follow --ckpt-strictness (a warning by default) and --finetune.
  EXPECT_EQ(run(with({"--load", dir, "--seq-length", "8"})).losses.size(), 2u);
  EXPECT_NE(error_of([&] { run(with({"--load", dir, "--seq-length", "8", "--ckpt-strictness", "raise_all"})); })
                .find("--seq-length: checkpoint 16, this run 8"),
            std::string::npos);
  EXPECT_EQ(run(with({"--load", dir, "--seq-length", "8", "--ckpt-strictness", "raise_all", "--finetune"}))
                .losses.size(),
            4u);
  EXPECT_EQ(run(with({"--load", dir, "--ckpt-strictness", "raise_all"})).losses.size(), 2u);  // the same model
}

// Each save holds run_config.yaml, listed in the manifest with its checksum: the run's resolved flags. --config reads
// it back as the same run, and --use-checkpoint-args takes the model from it as Megatron does: a resume that gives
// only the training flags (and a wrong --normalization, which the checkpoint's replaces) continues the
// uninterrupted run bit for bit.
TEST(Checkpoint, RunConfigAndUseCheckpointArgs) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_run_config";
  const std::string dir2 = dir + "_2";
  fs::remove_all(dir);
  fs::remove_all(dir2);
  const TrainResult full = run({});
  run({"--save", dir, "--exit-interval", "6"});
  const std::string cfg = dir + "/iter_0000006/run_config.yaml";
  ASSERT_TRUE(fs::exists(cfg));
  EXPECT_NE(read_text(dir + "/iter_0000006/manifest.json").find("\"run_config.yaml\": {\"bytes\""), std::string::npos);
  auto train_with = [](const std::vector<std::string>& args, std::string* log_text) {
    ModelConfig m;
    TrainConfig t;
    EXPECT_TRUE(parse_train_args(args, m, t, nullptr));
    std::ostringstream log;
    TrainResult r = train(m, t, log);
    if (log_text) *log_text = log.str();
    return r;
  };
  auto expect_second_half = [&](const TrainResult& r) {
    ASSERT_EQ(r.losses.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_TRUE(same_bits(full.losses[6 + i], r.losses[i])) << "iteration " << 7 + i;
  };
  expect_second_half(train_with({"--config", cfg, "--load", dir, "--save", dir2}, nullptr));
  const std::vector<std::string> training = {"--micro-batch-size",
                                             "2",
                                             "--global-batch-size",
                                             "4",
                                             "--train-iters",
                                             "12",
                                             "--lr",
                                             "1e-2",
                                             "--lr-decay-style",
                                             "cosine",
                                             "--lr-warmup-iters",
                                             "2",
                                             "--eval-interval",
                                             "4",
                                             "--eval-iters",
                                             "1",
                                             "--log-interval",
                                             "4",
                                             "--mock-data",
                                             "--device",
                                             "cpu",
                                             "--load",
                                             dir};
  auto with = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> a = training;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  std::string log;
  expect_second_half(train_with(with({"--use-checkpoint-args", "--normalization", "LayerNorm"}), &log));
  EXPECT_NE(log.find("from the checkpoint: --normalization RMSNorm (was LayerNorm)"), std::string::npos) << log;
  EXPECT_NE(log.find("from the checkpoint: --hybrid-layer-pattern [*-]*- (was None)"), std::string::npos) << log;
  EXPECT_NE(log.find("from the checkpoint: --hidden-size 32 (was 0)"), std::string::npos) << log;
  // Megatron takes the sizes only where the run leaves them unset: a --seq-length given stays (a warning on load).
  const std::string e = error_of([&] {
    train_with(with({"--use-checkpoint-args", "--seq-length", "8", "--ckpt-strictness", "raise_all"}), nullptr);
  });
  EXPECT_NE(e.find("--seq-length: checkpoint 16, this run 8"), std::string::npos) << e;
  EXPECT_NE(error_of([&] {
              train_with({"--use-checkpoint-args", "--mock-data", "--train-iters", "1"}, nullptr);
            }).find("--use-checkpoint-args: needs --load"),
            std::string::npos);
  // A run_config.yaml changed after the save is refused, naming it.
  write_text(cfg, read_text(cfg) + "hidden-size: 64\n");
  const std::string damaged = error_of([&] { train_with(with({"--use-checkpoint-args"}), nullptr); });
  EXPECT_NE(damaged.find(cfg + ": size differs from the manifest"), std::string::npos) << damaged;
}

std::vector<SafetensorsTensor> tensors_of(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<SafetensorsTensor> out;
  for (const auto& e : f.entries())
    out.push_back({e.name, e.dtype, e.shape, std::vector<unsigned char>(f.data(e), f.data(e) + (e.end - e.begin))});
  return out;
}

// NaN/Inf never reach a checkpoint silently: saving refuses them (naming the tensor) and so does
// loading, unless --ckpt-allow-non-finite.
TEST(Checkpoint, NonFiniteTensorsAreRefusedOnSaveAndLoad) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_nan";
  fs::remove_all(dir);
  // An lr beyond fp32's range turns the first step's weights into Inf/NaN: the save refuses them.
  const std::string diverged = error_of([&] {
    run({"--save", dir, "--train-iters", "1", "--lr", "1e39", "--lr-warmup-iters", "0", "--eval-iters", "0"});
  });
  EXPECT_NE(diverged.find("holds NaN or Inf values; refusing to save"), std::string::npos) << diverged;
  EXPECT_FALSE(fs::exists(dir + "/iter_0000001"));
  EXPECT_FALSE(fs::exists(dir + "/latest_checkpointed_iteration.txt"));

  run({"--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0"});
  const std::string it = dir + "/iter_0000002";
  const std::string model_before = read_text(it + "/model.safetensors");
  CheckpointContents c;
  c.manifest = read_manifest(it);
  c.model = tensors_of(it + "/model.safetensors");
  c.optimizer = tensors_of(it + "/optimizer.safetensors");
  const float nan = std::nanf("");
  std::memcpy(c.optimizer[3].bytes.data() + 4, &nan, 4);  // one Adam moment element, as a diverged run leaves it
  const std::string key = c.optimizer[3].name;
  const std::string refused = error_of([&] { save_checkpoint(dir, c); });
  EXPECT_NE(refused.find("'" + key + "'"), std::string::npos) << refused;
  EXPECT_EQ(read_text(it + "/model.safetensors"), model_before);  // the checkpoint is untouched
  save_checkpoint(dir, c, 0, /*allow_non_finite=*/true);
  const std::string load = error_of([&] { run({"--load", dir}); });
  EXPECT_NE(load.find("'" + key + "' holds NaN or Inf values; refusing to load"), std::string::npos) << load;
  EXPECT_EQ(run({"--load", dir, "--no-load-optim"}).losses.size(), 10u);  // the weights are finite
  // Allowed, the NaN moment reaches the weights and the first step stops on them.
  EXPECT_NE(error_of([&] { run({"--load", dir, "--ckpt-allow-non-finite"}); }).find("not finite"), std::string::npos);
}

// The manifest must vouch for every tensor file: listed by plain name with its size and checksum,
// model.safetensors always, nothing unlisted beside them, its iteration that of its directory.
TEST(Checkpoint, ManifestMustVouchForEveryTensorFile) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_manifest";
  fs::remove_all(dir);
  run({"--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0"});
  const std::string it = dir + "/iter_0000002", manifest = it + "/manifest.json";
  const std::string good = read_text(manifest);
  auto expect_refused = [&](const std::string& text, const std::string& needle) {
    ASSERT_NE(text, good) << "the edit for '" << needle << "' changed nothing";
    write_text(manifest, text);
    const std::string e = error_of([&] { read_manifest(it); });
    EXPECT_NE(e.find(needle), std::string::npos) << e;
    EXPECT_NE(error_of([&] { run({"--load", dir}); }), "");
    write_text(manifest, good);
  };
  auto replaced = [&](const std::string& re, const std::string& by) {
    return std::regex_replace(good, std::regex(re), by);
  };
  expect_refused(replaced("\"files\": \\{.*\\}\n\\}", "\"files\": {}\n}"), "does not list model.safetensors");
  expect_refused(replaced("\"model\\.safetensors\": \\{[^}]*\\}, ", ""), "does not list model.safetensors");
  expect_refused(replaced("\"optimizer\\.safetensors\"", "\"../iter_0000002/optimizer.safetensors\""),
                 "plain names");
  expect_refused(replaced("\"iteration\": 2,", "\"iteration\": 3,"), "differs from its directory's name");
  expect_refused(replaced("\"iteration\": 2,", "\"iteration\": 1000000000000000,"), "iteration 1000000000000000");
  expect_refused(replaced("\"optimizer_step\": 2,", "\"optimizer_step\": 7,"), "optimizer step 7");
  // More samples than two global batches (< 2^31 each) can hold: a resume would start the data there.
  expect_refused(replaced("\"consumed_samples\": [0-9]+,", "\"consumed_samples\": 8000000000000000,"),
                 "iteration 2 with 8000000000000000 consumed samples is inconsistent");
  // Missing keys and wrong types name the manifest (the JSON accessors alone do not).
  expect_refused(replaced("  \"consumed_samples\": [0-9]+,\n", ""), manifest + ": missing key 'consumed_samples'");
  expect_refused(replaced("\"config\": \"[^\"]*\"", "\"config\": 1"), manifest + ": config: expected a string");
  EXPECT_EQ(read_manifest(it).iteration, 2);
  // A manifest of an older hytra holds FNV-1a 64 checksums (computed here): still verified.
  auto fnv1a = [&](const std::string& file) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : read_text(it + "/" + file)) h = (h ^ c) * 1099511628211ull;
    char sum[17];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(h));
    return std::string(sum);
  };
  std::string old = good;
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "run_config.yaml"})
    old = std::regex_replace(
        old, std::regex(std::string("(\"") + file + "\": \\{\"bytes\": [0-9]+, )\"xxh3_64\": \"[0-9a-f]+\""),
        "$1\"fnv1a64\": \"" + fnv1a(file) + "\"");
  ASSERT_EQ(old.find("xxh3_64"), std::string::npos) << old;
  write_text(manifest, old);
  EXPECT_EQ(read_manifest(it).iteration, 2);
  expect_refused(std::regex_replace(old, std::regex("\"fnv1a64\": \"[0-9a-f]"), "\"fnv1a64\": \"x"),
                 "checksum differs from the manifest");
  write_text(manifest, good);
  // A tensor file the manifest does not list is never read: an error under raise_unexpected and raise_all, a
  // warning naming it otherwise.
  fs::copy_file(it + "/model.safetensors", it + "/extra.safetensors");
  EXPECT_EQ(read_manifest(it).unlisted, std::vector<std::string>{"extra.safetensors"});
  for (const char* strict : {"raise_unexpected", "raise_all"}) {
    const std::string e = error_of([&] { run({"--load", dir, "--ckpt-strictness", strict}); });
    EXPECT_NE(e.find("extra.safetensors: not listed in " + manifest), std::string::npos) << e;
    EXPECT_NE(e.find(strict), std::string::npos) << e;
  }
  testing::internal::CaptureStderr();
  EXPECT_EQ(run({"--load", dir, "--ckpt-strictness", "log_all"}).losses.size(), 10u);
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("extra.safetensors: not listed in " + manifest + "; ignored, not read"), std::string::npos)
      << warned;
  fs::remove(it + "/extra.safetensors");
  // A file the load reads must be listed: optimizer.safetensors dropped from the manifest but present.
  write_text(manifest, replaced(", \"optimizer\\.safetensors\": \\{[^}]*\\}", ""));
  EXPECT_EQ(read_manifest(it).unlisted, std::vector<std::string>{"optimizer.safetensors"});
  std::string e = error_of([&] { run({"--load", dir}); });
  EXPECT_NE(e.find("optimizer.safetensors: not listed in " + manifest + "; refusing to read an unverified"),
            std::string::npos)
      << e;
  EXPECT_EQ(run({"--load", dir, "--no-load-optim"}).losses.size(), 10u);  // the weights alone: a warning
  write_text(manifest, good);
  // A listed file that is missing: an error when the load reads it or under raise_all, a warning otherwise.
  fs::rename(it + "/optimizer.safetensors", dir + "/optimizer.moved");
  EXPECT_EQ(read_manifest(it).missing, std::vector<std::string>{"optimizer.safetensors"});
  e = error_of([&] { run({"--load", dir}); });
  EXPECT_NE(e.find("optimizer.safetensors is listed in the manifest but missing (this load reads it)"),
            std::string::npos)
      << e;
  e = error_of([&] { run({"--load", dir, "--no-load-optim", "--ckpt-strictness", "raise_all"}); });
  EXPECT_NE(e.find("missing (--ckpt-strictness raise_all)"), std::string::npos) << e;
  testing::internal::CaptureStderr();
  EXPECT_EQ(run({"--load", dir, "--no-load-optim"}).losses.size(), 10u);
  const std::string missing = testing::internal::GetCapturedStderr();
  EXPECT_NE(missing.find("optimizer.safetensors is listed in the manifest but missing"), std::string::npos) << missing;
  fs::rename(dir + "/optimizer.moved", it + "/optimizer.safetensors");
  // The tracker must hold an iteration number.
  for (const char* bad : {"", "abc\n", "2x\n", "-1\n"}) {
    write_text(dir + "/latest_checkpointed_iteration.txt", bad);
    EXPECT_NE(error_of([&] { resolve_checkpoint_dir(dir); }).find("expected an iteration number"), std::string::npos)
        << bad;
  }
  const std::string latest = dir + "/latest_checkpointed_iteration.txt";
  fs::remove(latest);
  fs::create_directory(latest);  // used to surface as "basic_filebuf::underflow error reading the file"
  EXPECT_NE(error_of([&] { resolve_checkpoint_dir(dir); }).find(latest + ": not a regular file"), std::string::npos);
  fs::remove(latest);
  // A tracker naming an iteration that is not there, or one whose save never finished, says which and why.
  write_text(latest, "5\n");
  EXPECT_NE(error_of([&] { resolve_checkpoint_dir(dir); }).find("iteration 5 named by " + latest + " does not exist"),
            std::string::npos);
  fs::create_directory(dir + "/iter_0000005");
  EXPECT_NE(error_of([&] {
              run({"--load", dir});
            }).find("iteration 5 named by " + latest + " has no manifest.json"),
            std::string::npos);
  write_text(latest, "2\n");
  EXPECT_EQ(read_manifest(resolve_checkpoint_dir(dir)).iteration, 2);
}

// Temporary directories of killed or failed saves are removed by the next save into the directory.
TEST(Checkpoint, SaveRemovesLeftoversOfKilledSaves) {
  const std::string dir = testing::TempDir() + "hytra_ckpt_leftover";
  fs::remove_all(dir);
  fs::create_directories(dir + "/iter_0000003.tmp-99999");
  write_text(dir + "/iter_0000003.tmp-99999/model.safetensors.tmp-99999", "partial");
  write_text(dir + "/latest_checkpointed_iteration.txt.tmp-99999", "");
  write_text(dir + "/notes.txt", "a user's file");
  EXPECT_EQ(leftover_save_temporaries(dir).size(), 2u);
  run({"--save", dir, "--train-iters", "2", "--lr-warmup-iters", "0"});
  EXPECT_TRUE(leftover_save_temporaries(dir).empty());
  EXPECT_FALSE(fs::exists(dir + "/iter_0000003.tmp-99999"));
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_EQ(read_manifest(resolve_checkpoint_dir(dir)).iteration, 2);
}


// The one expert-key normalisation (docs/spec/names.md §6: TEGroupedLinear's rules), exercised through
// the loader: a per-expert model reads a file's packed [E*out, in] tensor as E equal chunks and its
// [E, out, in] tensor by index; a grouped model stacks a complete per-expert set; an incomplete set
// is not stacked (the key is missing), a tensor that splits neither way is a named error.
TEST(Checkpoint, ExpertTensorsLoadFromEveryLayout) {
  const std::vector<std::string> moe = {"--hybrid-layer-pattern", "*E", "--num-experts", "4", "--moe-ffn-hidden-size",
                                        "16", "--disable-bias-linear", "--train-iters", "1", "--lr-warmup-iters", "0"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.begin(), moe.begin(), moe.end());
    return a;
  };
  const std::string src = testing::TempDir() + "hytra_ckpt_experts_src", dst = testing::TempDir() + "hytra_ckpt_experts";
  fs::remove_all(src);
  run(with({"--save", src}));  // per-expert layout: ...linear_fc1.weight0..3 [2F, C]
  const std::string fc1 = "decoder.layers.1.mlp.experts.linear_fc1.weight";
  const std::vector<SafetensorsTensor> saved = tensors_of(src + "/iter_0000001/model.safetensors");
  // Rewrites the checkpoint with fc1's experts replaced by `experts`, then loads it (weights only,
  // lr 0) and returns the error, or "" after checking that the reloaded weights equal the originals.
  auto load_with = [&](std::vector<SafetensorsTensor> experts, const std::vector<std::string>& layout) -> std::string {
    CheckpointContents c;
    c.manifest = read_manifest(src + "/iter_0000001");
    for (const SafetensorsTensor& t : saved)
      if (t.name.rfind(fc1, 0) != 0) c.model.push_back(t);
    for (SafetensorsTensor& t : experts) c.model.push_back(std::move(t));
    fs::remove_all(dst);
    save_checkpoint(dst + "_in", c);
    std::vector<std::string> args = {"--load", dst + "_in", "--finetune", "--lr", "0", "--save", dst,
                                     "--ckpt-strictness", "raise_all"};
    args.insert(args.end(), layout.begin(), layout.end());
    const std::string e = error_of([&] { run(with(args)); });
    fs::remove_all(dst + "_in");
    if (!e.empty()) return e;
    std::vector<unsigned char> want, got;  // the four experts' bytes, in expert order
    for (int x = 0; x < 4; ++x)
      for (const SafetensorsTensor& t : saved)
        if (t.name == fc1 + std::to_string(x)) want.insert(want.end(), t.bytes.begin(), t.bytes.end());
    for (const SafetensorsTensor& t : tensors_of(dst + "/iter_0000001/model.safetensors"))
      if (t.name.rfind(fc1, 0) == 0) got.insert(got.end(), t.bytes.begin(), t.bytes.end());
    EXPECT_EQ(got, want);
    return "";
  };
  std::vector<SafetensorsTensor> indexed;
  for (int x = 0; x < 4; ++x)
    for (const SafetensorsTensor& t : saved)
      if (t.name == fc1 + std::to_string(x)) indexed.push_back(t);
  ASSERT_EQ(indexed.size(), 4u);
  const int64_t out = indexed[0].shape[0], in = indexed[0].shape[1];
  auto stacked = [&](std::vector<int64_t> shape) {
    SafetensorsTensor g{fc1, "F32", std::move(shape), {}};
    for (const SafetensorsTensor& t : indexed) g.bytes.insert(g.bytes.end(), t.bytes.begin(), t.bytes.end());
    return g;
  };
  const std::vector<std::string> grouped = {"--moe-single-grouped-weight"};
  EXPECT_EQ(load_with({stacked({4 * out, in})}, {}), "");   // packed form: 4 equal chunks
  EXPECT_EQ(load_with({stacked({4, out, in})}, {}), "");    // grouped form: unbound on dim 0
  EXPECT_EQ(load_with(indexed, grouped), "");               // a complete per-expert set stacks
  EXPECT_EQ(load_with({stacked({4, out, in})}, grouped), "");
  const std::string incomplete = load_with({indexed[0], indexed[2]}, grouped);
  EXPECT_NE(incomplete.find("missing keys"), std::string::npos) << incomplete;  // not stacked
  EXPECT_NE(incomplete.find(fc1), std::string::npos) << incomplete;
  SafetensorsTensor odd = stacked({4 * out, in});
  odd.shape = {2, 2 * out * in};  // neither E rows nor E equal chunks of [out, in]
  const std::string split = load_with({odd}, {});
  EXPECT_NE(split.find("cannot split checkpoint tensor '" + fc1 + "'"), std::string::npos) << split;
}

}  // namespace
}  // namespace hytra
