#include "train/overlap_timeline.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace hytra {

std::vector<Interval> merge_intervals(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

std::vector<Interval> subtract_intervals(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (Interval i : a) {
    while (j < b.size() && b[j].end <= i.begin) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < i.end; ++k) {
      if (b[k].begin > i.begin) out.push_back({i.begin, b[k].begin});
      i.begin = std::max(i.begin, b[k].end);
    }
    if (i.end > i.begin) out.push_back(i);
  }
  return out;
}

double total_length(const std::vector<Interval>& v) {
  double t = 0;
  for (const Interval& i : v) t += i.end - i.begin;
  return t;
}

double overlap_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double t = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    t += std::max(0.0, std::min(a[i].end, b[j].end) - std::max(a[i].begin, b[j].begin));
    if (a[i].end < b[j].end)
      ++i;
    else
      ++j;
  }
  return t;
}

OverlapTimeline::OverlapTimeline(Exec& ex, dist::Communicator* comm) : ex_(ex), comm_(comm), clock_(ex.device()) {
  timing_.clock = &clock_;
}

OverlapTimeline::~OverlapTimeline() {
  if (comm_ != nullptr) comm_->time_with(nullptr);
}

void OverlapTimeline::begin_step() {
  clock_.start(ex_.stream());
  timing_.runs.clear();
  timing_.waits.clear();
  timing_.bytes = 0;
  turns_.clear();
  step_begin_ = clock_.mark(ex_.stream());
  if (comm_ != nullptr) comm_->time_with(&timing_);
}

void OverlapTimeline::begin_turn() { turn_begin_ = clock_.mark(ex_.stream()); }

void OverlapTimeline::end_turn() {
  HYTRA_ASSERT(turn_begin_ >= 0, "OverlapTimeline: a turn ended that did not begin");
  turns_.push_back({turn_begin_, clock_.mark(ex_.stream())});
  turn_begin_ = -1;
}

void OverlapTimeline::end_step() {
  const int step_end = clock_.mark(ex_.stream());
  if (comm_ != nullptr) comm_->time_with(nullptr);
  const std::vector<double> t = clock_.read();
  auto spans = [&](const std::vector<std::pair<int, int>>& marks) {
    std::vector<Interval> v;
    for (const auto& [b, e] : marks) v.push_back({t[size_t(b)], t[size_t(e)]});
    return merge_intervals(v);
  };
  const std::vector<Interval> comm = spans(timing_.runs);
  const std::vector<Interval> compute = subtract_intervals(spans(turns_), spans(timing_.waits));
  last_.step_ms = t[size_t(step_end)] - t[size_t(step_begin_)];
  last_.compute_ms = total_length(compute);
  last_.comm_ms = total_length(comm);
  last_.hidden_ms = overlap_length(comm, compute);
  last_.transfers = int64_t(timing_.runs.size());
  last_.bytes = timing_.bytes;
}

std::string ep_overlap_line(int64_t iteration, const OverlapTimeline::Summary& s) {
  char text[400];
  // GB/s: the bytes sent to other ranks over the transfers' busy time (the counts' gathers included in the time).
  std::snprintf(text, sizeof text,
                "hytra: EP-overlap iteration %lld: step %.2f ms; computation busy %.2f ms; %lld expert-parallel "
                "transfers busy %.2f ms (%.1f MB sent, %.1f GB/s), %.2f ms of it (%.1f%%) hidden behind computation",
                static_cast<long long>(iteration), s.step_ms, s.compute_ms, static_cast<long long>(s.transfers),
                s.comm_ms, double(s.bytes) / 1e6, s.comm_ms > 0 ? double(s.bytes) / 1e6 / s.comm_ms : 0.0, s.hidden_ms,
                s.comm_ms > 0 ? 100.0 * s.hidden_ms / s.comm_ms : 0.0);
  return text;
}

}  // namespace hytra
