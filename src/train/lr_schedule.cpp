// Megatron's OptimizerParamScheduler.get_lr counted in steps; formulas in lr_schedule.h.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace hytra {
namespace {

double cosine_coeff(double r) { return 0.5 * (std::cos(std::numbers::pi * r) + 1.0); }

double wsd_coeff(WsdDecayStyle style, double q) {
  switch (style) {
    case WsdDecayStyle::Exponential:
      return 2.0 * std::pow(0.5, q) - 1.0;
    case WsdDecayStyle::Linear:
      return 1.0 - q;
    case WsdDecayStyle::Cosine:
      return cosine_coeff(q);
    case WsdDecayStyle::MinusSqrt:
      return 1.0 - std::sqrt(q);
  }
  HYTRA_ASSERT(false, "unknown WSD decay style");
}

}  // namespace

std::vector<std::string> lr_schedule_errors(const LrScheduleConfig& c) {
  std::vector<std::string> errs;
  if (!(c.min_lr >= 0.0)) errs.push_back(str("--min-lr: expected >= 0, got ", c.min_lr));
  if (!(c.max_lr >= c.min_lr))
    errs.push_back(str("--lr: expected >= --min-lr (", c.min_lr, "), got ", c.max_lr));
  if (!(c.warmup_init <= c.max_lr))
    errs.push_back(str("--lr-warmup-init: expected <= --lr (", c.max_lr, "), got ", c.warmup_init));
  if (c.decay_steps <= 0) errs.push_back(str("--lr-decay-iters: expected > 0, got ", c.decay_steps));
  if (!(c.warmup_steps >= 0.0))
    errs.push_back(str("--lr-warmup-iters: expected >= 0, got ", c.warmup_steps));
  else if (!(c.warmup_steps < double(c.decay_steps)))
    errs.push_back(
        str("--lr-warmup-iters: expected < --lr-decay-iters (", c.decay_steps, "), got ", c.warmup_steps));
  if (c.decay_style == LrDecayStyle::WSD && (c.wsd_decay_steps <= 0 || c.wsd_decay_steps > c.decay_steps))
    errs.push_back(str("--lr-wsd-decay-iters: expected 1..--lr-decay-iters (", c.decay_steps,
                       ") with --lr-decay-style WSD, got ", c.wsd_decay_steps));
  return errs;
}

void validate(const LrScheduleConfig& cfg) {
  std::vector<std::string> errs = lr_schedule_errors(cfg);
  std::string msg;
  for (const auto& e : errs) msg += (msg.empty() ? "" : "\n") + e;
  HYTRA_CHECK(errs.empty(), msg);
}

double lr_at(const LrScheduleConfig& c, int64_t step) {
  HYTRA_ASSERT(step >= 0, "negative scheduler step ", step);
  const double s = double(step);
  if (c.warmup_steps > 0.0 && s <= c.warmup_steps)
    return c.warmup_init + (c.max_lr - c.warmup_init) * s / c.warmup_steps;
  if (c.decay_style == LrDecayStyle::Constant) return c.max_lr;
  if (step > c.decay_steps) return c.min_lr;
  if (c.decay_style == LrDecayStyle::InverseSquareRoot) {
    const double lr = c.max_lr * std::sqrt(std::max(c.warmup_steps, 1.0)) / std::sqrt(std::max(s, 1.0));
    return std::max(c.min_lr, lr);
  }
  const double r = (s - c.warmup_steps) / (double(c.decay_steps) - c.warmup_steps);
  double coeff = 1.0;
  switch (c.decay_style) {
    case LrDecayStyle::Linear:
      coeff = 1.0 - r;
      break;
    case LrDecayStyle::Cosine:
      coeff = cosine_coeff(r);
      break;
    case LrDecayStyle::WSD: {
      const int64_t anneal_start = c.decay_steps - c.wsd_decay_steps;
      if (step > anneal_start)
        coeff = wsd_coeff(c.wsd_decay_style, double(step - anneal_start) / double(c.wsd_decay_steps));
      break;
    }
    case LrDecayStyle::Constant:
    case LrDecayStyle::InverseSquareRoot:
      HYTRA_ASSERT(false, "handled above");
  }
  return c.min_lr + coeff * (c.max_lr - c.min_lr);
}

}  // namespace hytra
