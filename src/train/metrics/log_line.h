// Megatron's per-iteration console line and validation block, character for character (docs/spec/megatron_cli.md §1-§2).
//
// Iteration line: fields in this order, each followed by " |", optional ones only when set:
//   " [YYYY-MM-DD HH:MM:SS.ffffff]"  " iteration {:8d}/{:8d}"  " consumed samples: {:12d}"
//   " skipped samples: {:12d}" (> 0)  " elapsed time per iteration (ms): {:.1f}"
//   " throughput per GPU (TFLOP/s/GPU): {:.1f}" (--log-throughput)
//   " tokens per second: {:.1f}" (hytra addition; where throughput would be, after it when both)
//   " learning rate: {:.6E}"  " global batch size: {:5d}"  " {name}: {:.6E}" per loss (value >= 0)
//   " loss scale: {:.1f}"  " grad norm: {:.3f}"  " num zeros: {}"  " params norm: {:.3f}"
//   " number of skipped iterations: {:3d}"  " number of nan iterations: {:3d}"
// Losses keep the caller's order, as Megatron prints its total_loss_dict in insertion order; MoE
// auxiliary metrics (load_balancing_loss, z_loss) are entries of that dict in Megatron, so they go in
// `losses` too.
// Validation block: " validation loss at iteration {i} | " then "{name} value: {:.6E} | {name} PPL:
// {:.6E} | " per loss with PPL = exp(min(20, loss)), between two lines of '-' of length len + 1.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hytra {

// Local wall-clock time, broken down (what Python's datetime.now() shows).
struct LogTimestamp {
  int year = 1970, month = 1, day = 1, hour = 0, minute = 0, second = 0, microsecond = 0;
};
LogTimestamp log_timestamp_now();

using NamedValue = std::pair<std::string, double>;

// One MoE layer's routing over the logged iteration (JSONL only).
struct MoeLayerLog {
  int64_t layer = 0;                       // physical layer number
  double load_balancing_loss = 0, z_loss = 0;  // without their coefficients, as Megatron logs them
  std::vector<int64_t> tokens_per_expert;  // routed tokens, summed over the micro-batches
};

struct IterationLog {
  LogTimestamp time;
  int64_t iteration = 0;    // 1-based, after this step
  int64_t train_iters = 0;  // --train-iters
  int64_t consumed_samples = 0;
  int64_t skipped_samples = 0;           // printed only when > 0
  double ms_per_iter = 0.0;              // interval wall time / iterations in the interval, milliseconds
  std::optional<double> tflops_per_gpu;  // model FLOPs / (time * 1e12 * world size); --log-throughput
  std::optional<double> tokens_per_s;    // tokens / second over the interval (all GPUs)
  std::optional<double> lr;              // after the scheduler step of this iteration
  int64_t global_batch_size = 0;
  std::vector<NamedValue> losses;  // interval means: {"lm loss", 4.1}, {"mtp_1 loss", ...}
  std::vector<NamedValue> moe_metrics;  // interval means over layers: "load_balancing_loss", "z_loss"
  double loss_scale = 1.0;         // 1.0 for bf16
  std::optional<double> grad_norm;
  std::optional<int64_t> num_zeros;   // --log-num-zeros-in-grad
  std::optional<double> params_norm;  // --log-params-norm
  int64_t skipped_iterations = 0;     // in this interval
  int64_t nan_iterations = 0;         // in this interval
  std::vector<MoeLayerLog> moe_layers;  // per MoE layer, interval means (tokens: interval sums)
};

// "2026-08-22 10:00:00.123456"
std::string format_timestamp(const LogTimestamp& t);
// The iteration line, without a trailing newline.
std::string format_iteration_line(const IterationLog& log);
// The three validation lines ("---", text, "---"), each ending in '\n'.
std::string format_validation_block(int64_t iteration, const std::vector<NamedValue>& losses);

}  // namespace hytra
