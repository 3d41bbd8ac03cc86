// Sample-based runs and the batch-size ramp, as Megatron's num-microbatches calculator and update_train_iters
// (docs/spec/megatron_cli.md §4).
//
// --rampup-batch-size START INCR SAMPLES: the global batch starts at START and grows by INCR every
// SAMPLES / ((GBS - START) / INCR) consumed samples (a real quotient), reaching --global-batch-size once more than
// SAMPLES samples are consumed:
//   consumed > SAMPLES:  GBS
//   otherwise:           START + INCR * floor(consumed / (SAMPLES / ((GBS - START) / INCR)))
// --train-samples N: the run's iterations are N / GBS without a ramp; with one, the ramp's iterations (each consuming
// its batch, counted while the consumed samples are at most SAMPLES) plus (N - their samples) / GBS, the partial
// last batch dropped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hytra {

struct BatchRampup {
  int64_t start = 0;      // the first global batch size (0: no ramp)
  int64_t increment = 0;  // added at each ramp step
  int64_t samples = 0;    // consumed samples over which the ramp reaches the global batch size
  bool on() const { return start > 0; }
};

// The ramp from the flag's three values; errors name --rampup-batch-size and what was expected.
BatchRampup rampup_of(const std::vector<int64_t>& values, int64_t global_batch);
// Every violated constraint of `r` against the global batch and micro-batch x data-parallel size (empty when valid):
// positive start, increment and samples, start <= global batch, (global - start) a positive multiple
// of the increment, and every batch size the ramp reaches a multiple of `divisor`.
std::vector<std::string> rampup_errors(const BatchRampup& r, int64_t global_batch, int64_t divisor);

// The global batch size of the iteration that starts after `consumed` samples.
int64_t global_batch_at(const BatchRampup& r, int64_t global_batch, int64_t consumed);
// The iterations of a --train-samples run (Megatron's update_train_iters).
int64_t iterations_for_samples(const BatchRampup& r, int64_t global_batch, int64_t train_samples);

}  // namespace hytra
