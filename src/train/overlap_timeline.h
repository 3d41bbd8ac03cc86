// OverlapTimeline: what the EP-overlap schedule achieved in a step (docs/parallelism.md "The EP-overlap schedule";
// bench/NOTES.md says how to read it). One clock marks the computation stream around each turn of a pass and the
// expert-parallel communicator's stream around each all-to-all (dist::CommTiming). The computation stream counts as
// busy during the passes' turns except while it waits for a transfer; the communication as busy while a transfer
// runs; the hidden part is the time both were busy at once.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/stream_clock.h"
#include "dist/communicator.h"
#include "ops/exec.h"

namespace hytra {

struct Interval {
  double begin = 0, end = 0;
};
// The intervals merged into disjoint ones, in order.
std::vector<Interval> merge_intervals(std::vector<Interval> v);
// The parts of disjoint ordered intervals `a` outside those of `b` (also disjoint and ordered).
std::vector<Interval> subtract_intervals(const std::vector<Interval>& a, const std::vector<Interval>& b);
double total_length(const std::vector<Interval>& v);
// The length covered by both of two sets of disjoint ordered intervals.
double overlap_length(const std::vector<Interval>& a, const std::vector<Interval>& b);

class OverlapTimeline {
 public:
  // `comm`: the expert-parallel communicator (null: none, one rank).
  OverlapTimeline(Exec& ex, dist::Communicator* comm);
  ~OverlapTimeline();

  void begin_step();
  void begin_turn();  // a pass resumes (computation stream)
  void end_turn();    // ... and hands over
  void end_step();    // waits for the step's marks and sums them up

  struct Summary {
    double step_ms = 0, compute_ms = 0, comm_ms = 0, hidden_ms = 0;
    int64_t transfers = 0, bytes = 0;  // bytes: what the all-to-alls sent to other ranks
  };
  const Summary& last() const { return last_; }

 private:
  Exec& ex_;
  dist::Communicator* comm_;
  StreamClock clock_;
  dist::CommTiming timing_;
  std::vector<std::pair<int, int>> turns_;
  int turn_begin_ = -1, step_begin_ = -1;
  Summary last_;
};

// The log line of one step's summary (--log-ep-overlap).
std::string ep_overlap_line(int64_t iteration, const OverlapTimeline::Summary& s);

}  // namespace hytra
