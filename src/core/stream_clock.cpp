#include "core/stream_clock.h"

namespace hytra {

StreamClock::~StreamClock() {
  for (void* e : events_) cuda_event_destroy(e);
}

void StreamClock::start(void* stream) {
  used_ = 0;
  host_ms_.clear();
  if (device_ == Device::CPU) {
    origin_ = std::chrono::steady_clock::now();
    return;
  }
  if (events_.empty()) events_.push_back(cuda_event_create());
  cuda_event_record(events_[0], stream);
}

int StreamClock::mark(void* stream) {
  const int i = used_++;
  if (device_ == Device::CPU) {
    host_ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin_).count());
    return i;
  }
  if (size_t(i) + 1 >= events_.size()) events_.push_back(cuda_event_create());
  cuda_event_record(events_[size_t(i) + 1], stream);
  return i;
}

std::vector<double> StreamClock::read() {
  if (device_ == Device::CPU) return host_ms_;
  std::vector<double> out;
  for (int i = 0; i < used_; ++i) out.push_back(cuda_event_elapsed_ms(events_[0], events_[size_t(i) + 1]));
  return out;
}

}  // namespace hytra
