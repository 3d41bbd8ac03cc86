// Megatron's own checkpoints in hytra: the parameters tools/megatron_checkpoint.py took out of two torch_dist
// checkpoints that Megatron-Core wrote (tests/assets/megatron_torch_dist, a dense GPT and an MoE GPT) become hytra
// checkpoints through `hytra convert --from-megatron`, and `hytra eval-step` on them gives the per-token losses
// Megatron computed on the same batch, within 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "cli/eval_step.h"
#include "cli/flags.h"
#include "cli/hf_convert.h"

namespace hytra {
namespace {
namespace fs = std::filesystem;

const std::string kAssets = std::string(HYTRA_SOURCE_DIR) + "/tests/assets/megatron_torch_dist/";

// The launch flags of the Megatron models (tests/assets/megatron_torch_dist/README.md).
std::vector<std::string> model_flags(bool moe) {
  std::vector<std::string> f = {"--num-layers",
                                "2",
                                "--hidden-size",
                                "64",
                                "--num-attention-heads",
                                "4",
                                "--group-query-attention",
                                "--num-query-groups",
                                "2",
                                "--ffn-hidden-size",
                                "96",
                                "--swiglu",
                                "--normalization",
                                "RMSNorm",
                                "--norm-epsilon",
                                "1e-5",
                                "--disable-bias-linear",
                                "--position-embedding-type",
                                "rope",
                                "--rotary-base",
                                "10000",
                                "--vocab-size",
                                "256",
                                "--seq-length",
                                "32",
                                "--untie-embeddings-and-output-weights",
                                "--micro-batch-size",
                                "1",
                                "--train-iters",
                                "1",
                                "--lr",
                                "1e-4",
                                "--mock-data",
                                "--device",
                                "cpu"};
  if (moe)
    f.insert(f.end(), {"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "48",
                       "--moe-router-load-balancing-type", "none", "--moe-router-dtype", "fp32"});
  return f;
}

std::vector<float> floats(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsEntry* e = f.find(name);
  EXPECT_NE(e, nullptr) << name;
  if (e == nullptr) return {};
  EXPECT_EQ(e->dtype, "F32") << name;
  std::vector<float> v(size_t(e->end - e->begin) / 4);
  std::memcpy(v.data(), f.data(*e), v.size() * 4);
  return v;
}

void check(const std::string& name, bool moe) {
  const std::string dir = kAssets + name + "/", work = testing::TempDir() + "hytra_megatron_" + name;
  fs::remove_all(work);
  std::vector<std::string> args = model_flags(moe);
  args.insert(args.end(), {"--save", work + "/ckpt"});
  ModelConfig m;
  TrainConfig t;
  ASSERT_TRUE(parse_train_args(args, m, t, nullptr));
  convert_from_megatron(m, t, dir + "megatron_params.safetensors", t.save);
  t.load = t.save;
  eval_step(m, t, dir + "batch.safetensors", work + "/out.safetensors");
  const std::vector<float> want = floats(SafetensorsFile(dir + "batch.safetensors"), "per_token_loss");
  const std::vector<float> got = floats(SafetensorsFile(work + "/out.safetensors"), "losses");
  ASSERT_EQ(got.size(), 64u);
  ASSERT_EQ(want.size(), 64u);
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])) / std::fabs(double(want[i])));
  }
  EXPECT_LT(worst, 1e-5) << name;
  std::printf("%s: the largest relative difference from Megatron's per-token losses is %.3g\n", name.c_str(), worst);
}

TEST(MegatronTorchDist, DenseGivesMegatronsPerTokenLosses) { check("dense", false); }
TEST(MegatronTorchDist, MoeGivesMegatronsPerTokenLosses) { check("moe", true); }

}  // namespace
}  // namespace hytra
