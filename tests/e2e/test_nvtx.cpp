// --profile-nvtx: the ranges a profiler sees, recorded here through NVTX's static injection (the tool interface
// Nsight uses; this test binary defines the injection's entry point, which NVTX calls on the first range).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "common/error_of.h"
#include "train/trainer.h"

#if HYTRA_HAVE_CUDA
#include <cstdint>
// This file provides NVTX's static injection entry point (NVTX's own is a weak null); its type is
// NvtxInitializeInjectionNvtxFunc_t, spelled out because the header refers to the name.
extern "C" int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(uint32_t));
#define NVTX_STATIC_INJECTION_IMPL
#include <nvtx3/nvToolsExt.h>

namespace {
std::vector<std::string> pushed;
int depth = 0, deepest = 0;

int NVTX_API range_push(const char* name) {
  pushed.emplace_back(name);
  deepest = std::max(deepest, ++depth);
  return depth - 1;
}
int NVTX_API range_pop() { return --depth; }

int NVTX_API initialize(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) return 0;
  if (size <= NVTX_CBID_CORE_RangePop) return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&range_push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&range_pop);
  return 1;
}
}  // namespace

NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = initialize;
#endif

namespace hytra {
namespace {

TrainResult run(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--hybrid-layer-pattern",
                                   "*-E",
                                   "--hidden-size",
                                   "32",
                                   "--num-attention-heads",
                                   "4",
                                   "--num-experts",
                                   "4",
                                   "--moe-router-topk",
                                   "2",
                                   "--vocab-size",
                                   "64",
                                   "--seq-length",
                                   "8",
                                   "--micro-batch-size",
                                   "2",
                                   "--train-iters",
                                   "2",
                                   "--lr",
                                   "1e-3",
                                   "--eval-interval",
                                   "0",
                                   "--mock-data",
                                   "--device",
                                   "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  ModelConfig m;
  TrainConfig t;
  EXPECT_TRUE(parse_train_args(args, m, t, nullptr));
  std::ostringstream log;
  return train(m, t, log);
}

TEST(Nvtx, ProfileNvtxNamesOpsSubLayersAndPhases) {
#if HYTRA_HAVE_CUDA
  pushed.clear();
  run({});
  EXPECT_TRUE(pushed.empty()) << "ranges without --profile-nvtx";
  run({"--profile-nvtx", "--delay-wgrad-compute"});
  auto count = [](const std::string& name) { return std::count(pushed.begin(), pushed.end(), name); };
  EXPECT_EQ(depth, 0) << "every range pushed was popped";
  EXPECT_GE(deepest, 3);  // iteration > sub-layer > op
  EXPECT_EQ(count("iteration"), 2);
  EXPECT_EQ(count("optimizer step"), 2);
  EXPECT_EQ(count("gradient reduction"), 2);
  EXPECT_EQ(count("embedding forward"), 2);
  EXPECT_EQ(count("output layer and loss backward"), 2);
  for (const char* sub :
       {"decoder.layers.0 (attention)", "decoder.layers.1 (MLP)", "decoder.layers.2 (mixture-of-experts)"})
    for (const char* phase : {" forward", " backward", " weight gradients"})
      EXPECT_EQ(count(std::string(sub) + phase), 2) << sub << phase;
  EXPECT_GT(count("gemm"), 10);
  EXPECT_GT(count("attention_fwd"), 0);
  EXPECT_GT(count("adamw"), 0);
#else
  EXPECT_NE(test::error_of([] { run({"--profile-nvtx"}); }).find("--profile-nvtx: this hytra build has no CUDA"),
            std::string::npos);
#endif
}

}  // namespace
}  // namespace hytra
