// A one-line progress bar for interactive waits (data preprocessing, index building, checkpoint
// writes). Draws on a terminal only: when the stream is not a TTY (log files, CI) nothing is written,
// so logs stay clean. Redraws at most every `min_interval_s` seconds, plus once at finish().
//   "{label} [#########...........] {done}/{total}  42.0%  1234.5/s  ETA 00:01:23"
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hytra {

// The bar text for `done` of `total` after `elapsed_s` seconds (pure, for tests). total <= 0 means
// unknown: no bar, percentage or ETA. The ETA is "--:--:--" until the rate is known.
std::string format_progress(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                            int bar_width = 30);

class ProgressBar {
 public:
  // Draws to `out` (stderr by default) only when it is a terminal.
  ProgressBar(std::string label, int64_t total, std::FILE* out = stderr, double min_interval_s = 0.1);
  ~ProgressBar();  // calls finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done);  // sets the count; redraws if enough time has passed
  void advance(int64_t n = 1) { update(done_ + n); }
  void finish();  // final redraw and newline (once)
  bool enabled() const { return enabled_; }

 private:
  void draw();
  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_;
  std::FILE* out_;
  double min_interval_s_;
  bool enabled_;
  bool finished_ = false;
  int64_t done_ = 0;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  size_t last_width_ = 0;
};

}  // namespace hytra
