// A fixed pool of worker threads with a blocking parallel_for. Work is split into contiguous
// chunks by index, so which thread computes an element never changes the result: each output
// element is written by exactly one chunk (reductions combine per-chunk partials in chunk order).
// Exceptions: parallel_for always waits for every chunk to finish, then rethrows the exception of
// the lowest-numbered chunk that threw (on the calling thread), so the error a user sees does not
// depend on thread timing and no worker ever outlives the function object it runs.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hytra {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }  // the caller works too

  // Calls fn(begin, end) over [0, n) split into at most size() chunks of at least `grain` items.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool (HYTRA_NUM_THREADS or hardware concurrency).
  static ThreadPool& global();

 private:
  void worker_loop(int index);
  void run_chunk(size_t chunk);  // runs one chunk, capturing its exception into errors_

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  std::vector<std::exception_ptr> errors_;  // one slot per chunk, written only by its runner
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::mutex run_mu_;  // one parallel_for at a time; nested calls run inline
};

// Shorthand for ThreadPool::global().parallel_for.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace hytra
