#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace hytra {

namespace {
thread_local bool t_in_pool = false;
}

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  t_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (size_t(index) < chunks_.size()) {
      lock.unlock();
      run_chunk(size_t(index));
      lock.lock();
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::run_chunk(size_t chunk) {
  try {
    (*job_)(chunks_[chunk].first, chunks_[chunk].second);
  } catch (...) {
    errors_[chunk] = std::current_exception();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t nchunks = std::min<int64_t>(size(), (n + grain - 1) / grain);
  if (nchunks <= 1 || t_in_pool || !run_mu_.try_lock()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_, std::adopt_lock);
  const int64_t per = (n + nchunks - 1) / nchunks;
  nchunks = (n + per - 1) / per;  // no empty trailing chunk
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_.clear();
    for (int64_t c = 0; c < nchunks; ++c) chunks_.push_back({c * per, std::min(n, (c + 1) * per)});
    errors_.assign(size_t(nchunks), nullptr);
    job_ = &fn;
    pending_ = int(nchunks) - 1;
    ++generation_;
  }
  cv_work_.notify_all();
  t_in_pool = true;
  run_chunk(0);
  t_in_pool = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }
  for (const auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("HYTRA_NUM_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    return std::max(1, int(std::thread::hardware_concurrency()));
  }());
  return pool;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

}  // namespace hytra
