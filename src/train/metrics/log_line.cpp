// Megatron training-log formatting (log_line.h, docs/spec/megatron_cli.md §1-§2). printf's %E/%f round the exact binary
// value half-to-even like Python's format(), so the digits match Megatron's.
#include "train/metrics/log_line.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace hytra {
namespace {

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void appendf(std::string& out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n >= int(sizeof buf)) {
    std::string big(size_t(n) + 1, '\0');
    va_start(ap, fmt);
    std::vsnprintf(big.data(), big.size(), fmt, ap);
    va_end(ap);
    out.append(big.data(), size_t(n));
  } else if (n > 0) {
    out.append(buf, size_t(n));
  }
}

// Python prints every NaN as "nan"/"NAN"; printf shows the sign bit ("-nan"), so clear it.
double py(double v) { return std::isnan(v) ? std::fabs(v) : v; }

}  // namespace

LogTimestamp log_timestamp_now() {
  const auto now = std::chrono::system_clock::now();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const std::time_t secs = std::time_t(us / 1000000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  return {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(us % 1000000)};
}

std::string format_timestamp(const LogTimestamp& t) {
  std::string s;
  appendf(s, "%04d-%02d-%02d %02d:%02d:%02d.%06d", t.year, t.month, t.day, t.hour, t.minute, t.second,
          t.microsecond);
  return s;
}

std::string format_iteration_line(const IterationLog& g) {
  std::string s = " [" + format_timestamp(g.time) + "]";
  appendf(s, " iteration %8lld/%8lld |", (long long)g.iteration, (long long)g.train_iters);
  appendf(s, " consumed samples: %12lld |", (long long)g.consumed_samples);
  if (g.skipped_samples > 0) appendf(s, " skipped samples: %12lld |", (long long)g.skipped_samples);
  appendf(s, " elapsed time per iteration (ms): %.1f |", py(g.ms_per_iter));
  if (g.tflops_per_gpu) appendf(s, " throughput per GPU (TFLOP/s/GPU): %.1f |", py(*g.tflops_per_gpu));
  if (g.tokens_per_s) appendf(s, " tokens per second: %.1f |", py(*g.tokens_per_s));
  if (g.lr) appendf(s, " learning rate: %.6E |", py(*g.lr));
  appendf(s, " global batch size: %5lld |", (long long)g.global_batch_size);
  for (const auto& [name, value] : g.losses)
    if (value >= 0.0) appendf(s, " %s: %.6E |", name.c_str(), py(value));
  for (const auto& [name, value] : g.moe_metrics) appendf(s, " %s: %.2f |", name.c_str(), py(value));
  appendf(s, " loss scale: %.1f |", py(g.loss_scale));
  if (g.grad_norm) appendf(s, " grad norm: %.3f |", py(*g.grad_norm));
  if (g.num_zeros) appendf(s, " num zeros: %lld |", (long long)*g.num_zeros);
  if (g.params_norm) appendf(s, " params norm: %.3f |", py(*g.params_norm));
  appendf(s, " number of skipped iterations: %3lld |", (long long)g.skipped_iterations);
  appendf(s, " number of nan iterations: %3lld |", (long long)g.nan_iterations);
  return s;
}

std::string format_validation_block(int64_t iteration, const std::vector<NamedValue>& losses) {
  std::string s;
  appendf(s, " validation loss at iteration %lld | ", (long long)iteration);
  for (const auto& [name, value] : losses) {
    appendf(s, "%s value: %.6E | ", name.c_str(), py(value));
    appendf(s, "%s PPL: %.6E | ", name.c_str(), py(std::exp(std::min(20.0, value))));
  }
  const std::string rule(s.size() + 1, '-');
  return rule + "\n" + s + "\n" + rule + "\n";
}

}  // namespace hytra
