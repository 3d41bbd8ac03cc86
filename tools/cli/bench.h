// `hytra bench`: trains a config for warm-up plus measured steps and summarises the measured ones
// (median step time, tokens/s, model TFLOP/s per GPU, MFU against the H100's 989 TFLOP/s dense bf16
// peak, allocator peak memory). The record line is the one bench/peer/ prints, so hytra and the
// PyTorch peer can be compared line by line (bench/NOTES.md).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

#include "model/config.h"
#include "nn/param.h"
#include "train/train_config.h"

namespace hytra::dist {
struct ParallelContext;
}

namespace hytra {

inline constexpr double kPeakBf16Flops = 989e12;  // H100 SXM dense bf16 (datasheet)

struct BenchResult {
  std::string name;
  int64_t micro_batch = 0, global_batch = 0, seq_length = 0, steps = 0;
  int gpus = 1;        // the ranks (processes): data-parallel x pipeline
  double step_ms = 0;  // median of the measured steps
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs (model/flops.h) per second / 1e12, per rank
  double mfu = 0;             // tflops_per_gpu / 989, as a fraction
  double peak_mem_gib = 0;    // allocator peak over the whole run, GiB
  double last_loss = 0;
  int64_t num_params = 0;
  double flops_per_token = 0;
};

// Throws naming --warmup / --steps unless warmup >= 0, steps >= 1 and their sum fits in int64.
void check_bench_counts(int64_t warmup, int64_t steps);

// Trains `model`/`train` for `warmup + steps` iterations (train_iters is overridden, validation off)
// and measures the last `steps`. A fresh run only: --load is an error.
// par: the run's communicators (tools/cli/parallel_run.h; nullptr: one process).
BenchResult run_bench(const std::string& name, const ModelConfig& model, TrainConfig train, int64_t warmup,
                      int64_t steps, std::ostream& log, dist::ParallelContext* par = nullptr);

// `hytra bench --skew-routing`: sets expert 0's router expert bias to 1 in every MoE layer, so that every token
// picks expert 0 among its top k (router scores lie in [0, 1]): 1/k of the routed rows land on one expert. Throws
// when the model has no expert bias.
void skew_routing(ParamStore& store);

// "hytra config=<name> gpus=.. mbs=.. gbs=.. seq=.. step_ms=.. tokens_per_s=.. tflops_per_gpu=.. mfu=..%
// peak_mem_gib=.. loss=.." — one line.
std::string format_bench_record(const BenchResult& r);

}  // namespace hytra
