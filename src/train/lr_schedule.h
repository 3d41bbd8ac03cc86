// Learning-rate schedule: Megatron-Core's OptimizerParamScheduler.get_lr (docs/spec/megatron_cli.md §4, docs/spec/gotchas.md §2 item 6).
//
// Megatron counts the schedule in samples (num_steps += global batch after every iteration). hytra
// counts in optimizer steps: at a constant global batch every ratio below is the same quotient, so the
// rates agree to rounding (bit for bit after warmup for linear, cosine and WSD, whose ratios are
// quotients of exact integers). The one real difference is inverse-square-root with zero warmup, where
// Megatron clamps the warmup to 1 *sample* and hytra to 1 *step*. A caller wanting Megatron's exact
// numbers can express every field (and the step argument) in samples instead: the formulas below
// evaluate in Megatron's order.
//
// With s = step, W = warmup_steps, D = decay_steps, A = D - wsd_decay_steps:
//   W > 0 and s <= W      init + (max - init) * s / W                       (warmup, any style)
//   constant              max
//   s > D                 min
//   inverse-square-root   max(min, max * sqrt(max(W,1)) / sqrt(max(s,1)))
//   linear / cosine / WSD min + (max - min) * coeff(r),  r = (s - W) / (D - W)
//     linear 1 - r;  cosine 0.5 * (1 + cos(pi r));
//     WSD: 1 while s <= A, then with q = (s - A) / wsd_decay_steps:
//       exponential 2 * 0.5^q - 1;  linear 1 - q;  cosine 0.5 * (1 + cos(pi q));  minus_sqrt 1 - sqrt(q)
//
// Which step to ask for: the scheduler is stepped after each optimizer step, so iteration i (1-based)
// trains with lr_at(cfg, i - 1) (iteration 1 runs at the warmup init lr) and the "learning rate" that
// Megatron logs for iteration i is lr_at(cfg, i).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/enum_text.h"

namespace hytra {

enum class LrDecayStyle { Constant, Linear, Cosine, InverseSquareRoot, WSD };
enum class WsdDecayStyle { Exponential, Linear, Cosine, MinusSqrt };

struct LrScheduleConfig {
  double max_lr = 0.0;       // peak lr; --lr (no default: must be set)
  double min_lr = 0.0;       // floor after decay; --min-lr, default 0.0
  double warmup_init = 0.0;  // lr at step 0; --lr-warmup-init, default 0.0
  // Warmup length in steps; --lr-warmup-iters (default 0), or --lr-warmup-fraction * decay_steps,
  // which Megatron keeps unrounded (so it may be fractional).
  double warmup_steps = 0.0;
  int64_t decay_steps = 0;  // decay horizon in steps; --lr-decay-iters, default = --train-iters
  LrDecayStyle decay_style = LrDecayStyle::Linear;  // --lr-decay-style, default linear
  int64_t wsd_decay_steps = 0;  // WSD anneal length in steps; --lr-wsd-decay-iters (needed for WSD)
  WsdDecayStyle wsd_decay_style = WsdDecayStyle::Exponential;  // --lr-wsd-decay-style, default exponential
};

// The flag values' names (name_of / enum_of, model/enum_text.h).
template <>
struct EnumText<LrDecayStyle> {
  static constexpr std::array<std::pair<LrDecayStyle, const char*>, 5> names = {
      {{LrDecayStyle::Constant, "constant"}, {LrDecayStyle::Linear, "linear"}, {LrDecayStyle::Cosine, "cosine"},
       {LrDecayStyle::InverseSquareRoot, "inverse-square-root"}, {LrDecayStyle::WSD, "WSD"}}};
};
template <>
struct EnumText<WsdDecayStyle> {
  static constexpr std::array<std::pair<WsdDecayStyle, const char*>, 4> names = {
      {{WsdDecayStyle::Exponential, "exponential"}, {WsdDecayStyle::Linear, "linear"},
       {WsdDecayStyle::Cosine, "cosine"}, {WsdDecayStyle::MinusSqrt, "minus_sqrt"}}};
};

// Every violated constraint as "--flag: expected X, got Y" (empty when valid): the ones Megatron
// asserts (min >= 0, max >= min, init <= max, decay > 0, warmup < decay, WSD needs its length) plus
// non-negative warmup and 0 < wsd_decay_steps <= decay_steps for WSD.
std::vector<std::string> lr_schedule_errors(const LrScheduleConfig& cfg);
// Throws hytra::Error listing every violation, one per line.
void validate(const LrScheduleConfig& cfg);

// The learning rate after `step` scheduler steps (step >= 0). cfg must be valid.
double lr_at(const LrScheduleConfig& cfg, int64_t step);

}  // namespace hytra
