// StreamClock: when a stream's work reached given points, in milliseconds since start(). On CUDA each point is an
// event recorded on the stream (read once the work has run, so marking never waits); on the CPU, where work runs as
// it is issued, it is the host clock at the call. The EP-overlap timeline (train/overlap_timeline.h) marks the
// computation and the communicators' streams with one clock.
#pragma once
#include <chrono>
#include <vector>

#include "core/device.h"

namespace hytra {

class StreamClock {
 public:
  explicit StreamClock(Device device) : device_(device) {}
  ~StreamClock();
  StreamClock(const StreamClock&) = delete;
  StreamClock& operator=(const StreamClock&) = delete;

  // The origin, on `stream` (null on the CPU); forgets the earlier marks.
  void start(void* stream);
  // A point on `stream`: its index in read()'s answer.
  int mark(void* stream);
  // Every mark's time since the origin (waits for the marked work).
  std::vector<double> read();

 private:
  Device device_;
  std::vector<void*> events_;  // CUDA: [0] the origin, then one per mark (kept for reuse)
  int used_ = 0;               // marks since start()
  std::chrono::steady_clock::time_point origin_;
  std::vector<double> host_ms_;  // CPU: the marks' times
};

}  // namespace hytra
