// Fiber: a function that runs on a stack of its own and can suspend itself (Fiber::yield) until the owner resumes
// it, all on the owner's thread. The EP-overlap schedule (train/combined_schedule.h) runs the forward of one
// micro-batch and the backward of another as two fibers and switches between them at fixed points, so the layers'
// code stays one straight sequence of calls while their work interleaves; only one fiber runs at a time, in an
// order the schedule alone decides, so the interleaving is deterministic. Being one thread, the fibers share its
// CUDA device and MPI's single-thread guarantee.
#pragma once
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>

namespace hytra {

class Fiber {
 public:
  explicit Fiber(std::function<void()> body, size_t stack_bytes = size_t(8) << 20);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the body until it yields or returns; true while it has more to run. An exception the body throws ends it
  // and is rethrown here. A fiber destroyed while suspended never finishes: what its stack holds is not released
  // (only after an error elsewhere ended the run).
  bool resume();
  bool done() const { return done_; }
  // Suspends the fiber running on this thread (called from its body): its resume() returns true.
  static void yield();
  // Whether the caller runs inside a fiber.
  static bool inside();

 private:
  struct Context;
  static void entry();
  std::function<void()> body_;
  std::unique_ptr<char[]> stack_;
  size_t stack_bytes_;
  std::unique_ptr<Context> ctx_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace hytra
