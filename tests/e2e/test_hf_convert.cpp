// hytra convert (cli/hf_convert.h, interop/hf_convert.h): for a tiny model of each family (Llama, Qwen3-MoE, NemotronH
// with Mamba, attention, MLP and MoE with shared experts; DeepSeek-V3 with MLA, YaRN, grouped routing and MTP), a
// trained checkpoint written as a Hugging Face folder in
// fp32 and read back gives every tensor bit for bit; bf16 shards with an index read back as the bf16 values; the
// imported checkpoint trains to the same loss as the original; models without a form are named errors.
// (tests/interop/hf_transformers_check.py compares the logits with transformers' own classes on the GPU machine.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "checkpoint/float_decode.h"
#include "checkpoint/safetensors.h"
#include "cli/flags.h"
#include "cli/hf_convert.h"
#include "common/error_of.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "train/trainer.h"

namespace hytra {
namespace {
namespace fs = std::filesystem;

struct Family {
  const char* name;
  std::vector<std::string> flags;
};

const std::vector<std::string> kCommon = {"--hidden-size", "32", "--num-attention-heads", "4", "--group-query-attention",
                                          "--num-query-groups", "2", "--ffn-hidden-size", "64", "--normalization",
                                          "RMSNorm", "--disable-bias-linear", "--vocab-size", "256", "--seq-length",
                                          "16"};

// A DeepSeek-V3-shaped model: MLA with the query latent and YaRN, a dense first layer, group-limited sigmoid routing
// with the expert bias, a shared expert, one MTP depth.
const std::vector<std::string> kDeepseek = {"--hybrid-layer-pattern",
                                            "[+-][+E]/+E",
                                            "--swiglu",
                                            "--position-embedding-type",
                                            "rope",
                                            "--qk-layernorm",
                                            "--norm-epsilon",
                                            "1e-6",
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
                                            "--rotary-scaling-factor",
                                            "40",
                                            "--mscale",
                                            "1",
                                            "--mscale-all-dim",
                                            "1",
                                            "--num-experts",
                                            "4",
                                            "--moe-ffn-hidden-size",
                                            "16",
                                            "--moe-router-topk",
                                            "2",
                                            "--moe-router-score-function",
                                            "sigmoid",
                                            "--moe-router-enable-expert-bias",
                                            "--moe-shared-expert-intermediate-size",
                                            "16",
                                            "--moe-router-num-groups",
                                            "2",
                                            "--moe-router-group-topk",
                                            "1",
                                            "--moe-router-topk-scaling-factor",
                                            "2.5",
                                            "--untie-embeddings-and-output-weights"};

std::vector<Family> families() {
  return {
      {"llama",
       {"--num-layers", "2", "--swiglu", "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights"}},
      {"qwen3_moe",
       {"--hybrid-layer-pattern", "[*E][*-]", "--swiglu", "--position-embedding-type", "rope", "--qk-layernorm",
        "--num-experts", "4", "--moe-ffn-hidden-size", "16", "--moe-router-topk", "2"}},
      {"nemotron_h",
       {"--hybrid-layer-pattern",
        "M*-E",
        "--squared-relu",
        "--position-embedding-type",
        "none",
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
        "16",
        "--moe-router-topk",
        "2",
        "--moe-router-score-function",
        "sigmoid",
        "--moe-router-enable-expert-bias",
        "--moe-shared-expert-intermediate-size",
        "32",
        "--moe-router-topk-scaling-factor",
        "2.5",
        "--untie-embeddings-and-output-weights"}},
      {"deepseek_v3", kDeepseek},
  };
}

void configure(const std::vector<std::string>& model, const std::vector<std::string>& extra, ModelConfig& m,
               TrainConfig& t) {
  std::vector<std::string> args = kCommon;
  args.insert(args.end(), model.begin(), model.end());
  args.insert(args.end(), {"--mock-data", "--micro-batch-size", "2", "--global-batch-size", "2", "--lr", "1e-2",
                           "--lr-warmup-iters", "0", "--eval-iters", "0", "--device", "cpu"});
  args.insert(args.end(), extra.begin(), extra.end());
  ASSERT_TRUE(parse_train_args(args, m, t, nullptr));
}

TrainResult train_with(const std::vector<std::string>& model, const std::vector<std::string>& extra) {
  ModelConfig m;
  TrainConfig t;
  configure(model, extra, m, t);
  std::ostringstream log;
  return train(m, t, log);
}

std::map<std::string, std::string> tensor_bytes(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, std::string> out;
  for (const SafetensorsEntry& e : f.entries())
    out[e.name] = std::string(reinterpret_cast<const char*>(f.data(e)), size_t(e.end - e.begin));
  return out;
}

TEST(HfConvert, EachFamilyRoundTripsBitwiseAndTrainsTheSame) {
  for (const Family& fam : families()) {
    SCOPED_TRACE(fam.name);
    const std::string base = testing::TempDir() + "hytra_hf_" + fam.name;
    for (const char* d : {"", "_hf", "_back", "_bf16", "_bf16_back"}) fs::remove_all(base + d);
    train_with(fam.flags, {"--train-iters", "3", "--save", base});
    ModelConfig m;
    TrainConfig t;
    configure(fam.flags, {"--train-iters", "1", "--load", base}, m, t);
    EXPECT_EQ(hf_family_name(convert_to_hf(m, t, base + "_hf", std::nullopt, HfExportOptions{false, 5'000'000'000})),
              std::string(fam.name));
    const Json config = Json::parse_file(base + "_hf/config.json");
    EXPECT_EQ(config.at("model_type").as_string(), fam.name);
    EXPECT_TRUE(fs::exists(base + "_hf/model.safetensors"));
    const HfImport back = convert_from_hf(base + "_hf", base + "_back");
    EXPECT_EQ(back.family, hf_family_of(fam.name));
    const auto original = tensor_bytes(base + "/iter_0000003/model.safetensors");
    const auto again = tensor_bytes(back.checkpoint + "/model.safetensors");
    ASSERT_EQ(original.size(), again.size());
    for (const auto& [name, bytes] : original) {
      ASSERT_TRUE(again.count(name)) << name;
      EXPECT_TRUE(again.at(name) == bytes) << name;
    }
    // The imported checkpoint trains exactly as the original does (its own flags build the same model).
    const std::vector<std::string> once = {"--train-iters", "1", "--finetune", "--lr", "0"};
    std::vector<std::string> a = once, b = once;
    a.insert(a.end(), {"--load", base});
    b.insert(b.end(), {"--load", base + "_back"});
    std::vector<std::string> imported_flags = back.model_flags;
    imported_flags.insert(imported_flags.end(), {"--seq-length", "16"});
    ModelConfig mi;
    TrainConfig ti;
    std::vector<std::string> args = imported_flags;
    args.insert(args.end(), {"--mock-data", "--micro-batch-size", "2", "--global-batch-size", "2", "--lr-warmup-iters",
                             "0", "--eval-iters", "0", "--device", "cpu"});
    args.insert(args.end(), b.begin(), b.end());
    ASSERT_TRUE(parse_train_args(args, mi, ti, nullptr));
    std::ostringstream log;
    const TrainResult ri = train(mi, ti, log);
    const TrainResult ro = train_with(fam.flags, a);
    ASSERT_EQ(ri.losses.size(), 1u);
    EXPECT_EQ(ri.losses[0], ro.losses[0]);
    // bf16, sharded (a limit below one tensor's size: one tensor a shard) with an index.
    convert_to_hf(m, t, base + "_bf16/", std::nullopt, HfExportOptions{true, 4096});  // (a trailing slash too)
    EXPECT_TRUE(fs::exists(base + "_bf16/model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(base + "_bf16/model.safetensors"));
    const HfImport narrow = convert_from_hf(base + "_bf16", base + "_bf16_back");
    const auto rounded = tensor_bytes(narrow.checkpoint + "/model.safetensors");
    for (const auto& [name, bytes] : original) {
      std::vector<float> want(bytes.size() / 4), got(bytes.size() / 4);
      std::memcpy(want.data(), bytes.data(), bytes.size());
      std::memcpy(got.data(), rounded.at(name).data(), bytes.size());
      const bool fp32 = name.find("A_log") != std::string::npos || name.find(".D") != std::string::npos ||
                        name.find("dt_bias") != std::string::npos || name.find("expert_bias") != std::string::npos;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(got[i], fp32 ? want[i] : bf16_to_float(float_to_bf16(want[i]))) << name << " element " << i;
    }
  }
}

TEST(HfConvert, ModelsWithoutAFormAreNamedErrors) {
  const std::string base = testing::TempDir() + "hytra_hf_errors";
  fs::remove_all(base);
  const std::vector<std::string> gelu = {"--num-layers", "1", "--position-embedding-type", "rope"};
  train_with(gelu, {"--train-iters", "1", "--save", base});
  ModelConfig m;
  TrainConfig t;
  configure(gelu, {"--train-iters", "1", "--load", base}, m, t);
  const std::string e = test::error_of([&] { convert_to_hf(m, t, base + "_hf", HfFamily::Llama, {}); });
  EXPECT_NE(e.find("the MLP activation: llama's is SwiGLU (--swiglu)"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(base + "_hf"));
  const std::string n = test::error_of([&] { convert_to_hf(m, t, base + "_hf", HfFamily::NemotronH, {}); });
  EXPECT_NE(n.find("NemotronH has no position embedding"), std::string::npos) << n;
  // An existing folder is never overwritten; a missing --load is named.
  const std::vector<std::string> llama = {"--num-layers", "1", "--swiglu", "--position-embedding-type", "rope"};
  fs::remove_all(base + "_llama");
  train_with(llama, {"--train-iters", "1", "--save", base + "_llama"});
  fs::create_directories(base + "_exists");
  ModelConfig ml;
  TrainConfig tl;
  configure(llama, {"--train-iters", "1", "--load", base + "_llama"}, ml, tl);
  const std::string x = test::error_of([&] { convert_to_hf(ml, tl, base + "_exists", HfFamily::Llama, {}); });
  EXPECT_NE(x.find("exists already"), std::string::npos) << x;
  tl.load.clear();
  const std::string l = test::error_of([&] { convert_to_hf(ml, tl, base + "_new", HfFamily::Llama, {}); });
  EXPECT_NE(l.find("--load: required"), std::string::npos) << l;
  // A folder whose tensor does not have the shape its config.json implies is refused by name before it is read.
  fs::remove_all(base + "_llama_hf");
  tl.load = base + "_llama";
  convert_to_hf(ml, tl, base + "_llama_hf", HfFamily::Llama, {false, 5'000'000'000});
  {
    SafetensorsFile f(base + "_llama_hf/model.safetensors");
    std::vector<SafetensorsTensor> tensors;
    for (const SafetensorsEntry& e : f.entries()) {
      SafetensorsTensor t{e.name, e.dtype, e.shape,
                          std::vector<unsigned char>(f.data(e), f.data(e) + (e.end - e.begin))};
      if (e.name == "model.layers.0.self_attn.k_proj.weight") {  // half its rows
        t.shape[0] /= 2;
        t.bytes.resize(t.bytes.size() / 2);
      }
      tensors.push_back(std::move(t));
    }
    fs::create_directories(base + "_bad");
    fs::copy_file(base + "_llama_hf/config.json", base + "_bad/config.json", fs::copy_options::overwrite_existing);
    write_safetensors(base + "_bad/model.safetensors", std::move(tensors), {{"format", "pt"}});
  }
  fs::remove_all(base + "_bad_back");
  const std::string k = test::error_of([&] { convert_from_hf(base + "_bad", base + "_bad_back"); });
  EXPECT_NE(k.find("tensor 'model.layers.0.self_attn.k_proj.weight' is [8, 32], the model expects [16, 32]"),
            std::string::npos)
      << k;
  // A model trained with one grouped expert tensor exports per-expert tensors (the loader splits them).
  const std::vector<std::string> grouped = {"--hybrid-layer-pattern",
                                            "[*E]",
                                            "--swiglu",
                                            "--position-embedding-type",
                                            "rope",
                                            "--qk-layernorm",
                                            "--num-experts",
                                            "4",
                                            "--moe-ffn-hidden-size",
                                            "16",
                                            "--moe-single-grouped-weight"};
  fs::remove_all(base + "_grouped");
  fs::remove_all(base + "_grouped_hf");
  train_with(grouped, {"--train-iters", "1", "--save", base + "_grouped"});
  ModelConfig mg;
  TrainConfig tg;
  configure(grouped, {"--train-iters", "1", "--load", base + "_grouped"}, mg, tg);
  EXPECT_EQ(convert_to_hf(mg, tg, base + "_grouped_hf", std::nullopt, {}), HfFamily::Qwen3Moe);
  SafetensorsFile gf(base + "_grouped_hf/model.safetensors");
  EXPECT_NE(gf.find("model.layers.0.mlp.experts.3.down_proj.weight"), nullptr);
}

}  // namespace
}  // namespace hytra
