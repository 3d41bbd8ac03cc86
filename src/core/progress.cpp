// Terminal progress bar (progress.h).
#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace hytra {
namespace {

std::string hms(double seconds) {
  const int64_t s = int64_t(std::llround(seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                (long long)(s % 60));
  return buf;
}

}  // namespace

std::string format_progress(const std::string& label, int64_t done, int64_t total, double elapsed_s, int bar_width) {
  std::string s = label;
  char buf[128];
  const double rate = elapsed_s > 0.0 ? double(done) / elapsed_s : 0.0;
  if (total > 0) {
    const double frac = std::clamp(double(done) / double(total), 0.0, 1.0);
    const int filled = int(frac * bar_width);
    s += " [" + std::string(size_t(filled), '#') + std::string(size_t(bar_width - filled), '.') + "]";
    std::snprintf(buf, sizeof buf, " %lld/%lld  %5.1f%%", (long long)done, (long long)total, 100.0 * frac);
  } else {
    std::snprintf(buf, sizeof buf, " %lld", (long long)done);
  }
  s += buf;
  std::snprintf(buf, sizeof buf, "  %.1f/s", rate);
  s += buf;
  if (total > 0) s += "  ETA " + (rate > 0.0 ? hms(double(std::max<int64_t>(0, total - done)) / rate) : "--:--:--");
  return s;
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::FILE* out, double min_interval_s,
                         double plain_interval_s)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      min_interval_s_(min_interval_s),
      plain_interval_s_(plain_interval_s),
      enabled_(out != nullptr && isatty(fileno(out)) == 1),
      start_(Clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done) {
  done_ = done;
  if (finished_ || out_ == nullptr || (!enabled_ && plain_interval_s_ <= 0)) return;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - last_draw_).count() < (enabled_ ? min_interval_s_ : plain_interval_s_))
    return;
  last_draw_ = now;
  if (enabled_)
    draw();
  else
    plain_line();
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) {
    draw();
    std::fputc('\n', out_);
    std::fflush(out_);
  } else if (plain_written_) {
    plain_line();
  }
}

void ProgressBar::plain_line() {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::fprintf(out_, "hytra: %s\n", format_progress(label_, done_, total_, elapsed).c_str());
  std::fflush(out_);
  plain_written_ = true;
}

void ProgressBar::draw() {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string text = format_progress(label_, done_, total_, elapsed);
  const size_t width = text.size();
  if (width < last_width_) text += std::string(last_width_ - width, ' ');
  last_width_ = width;
  std::fprintf(out_, "\r%s", text.c_str());
  std::fflush(out_);
}

}  // namespace hytra
