// A one-line progress bar for interactive waits (data preprocessing, index building, validation, checkpoint saves
// and loads). On a terminal it redraws at most every `min_interval_s` seconds, plus once at finish(). Elsewhere (log
// files, CI) it writes nothing, unless `plain_interval_s` > 0: then a plain line every that many seconds, and one at
// finish() when any was written, so a long wait shows in a log and a short one adds nothing.
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

// The plain-line interval of the long waits (validation, index building, checkpoint saves and loads).
inline constexpr double kPlainProgressSeconds = 10;

class ProgressBar {
 public:
  // Draws to `out` (stderr by default; null: nowhere).
  ProgressBar(std::string label, int64_t total, std::FILE* out = stderr, double min_interval_s = 0.1,
              double plain_interval_s = 0);
  ~ProgressBar();  // calls finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done);  // sets the count; redraws if enough time has passed
  void advance(int64_t n = 1) { update(done_ + n); }
  void finish();                             // final redraw and newline (once)
  bool enabled() const { return enabled_; }  // drawing on a terminal

 private:
  void draw();
  void plain_line();
  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_;
  std::FILE* out_;
  double min_interval_s_;
  double plain_interval_s_;
  bool enabled_;
  bool plain_written_ = false;
  bool finished_ = false;
  int64_t done_ = 0;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  size_t last_width_ = 0;
};

}  // namespace hytra
