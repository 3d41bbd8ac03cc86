// ThreadPool::parallel_for: chunks cover [0, n) exactly once, and an exception from any chunk (on
// the caller's chunk 0 or on a worker's) reaches the caller only after every chunk has finished,
// the lowest-numbered throwing chunk's exception winning.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace hytra {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceWithoutEmptyChunks) {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 3, 5, 7, 16, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> chunks{0};
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      EXPECT_LT(b, e) << "n=" << n;
      ++chunks;
      for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
    EXPECT_LE(chunks.load(), pool.size());
  }
}

// Chunk c of parallel_for(4, 1, ...) on a 4-thread pool is [c, c+1): chunk 0 runs on the caller,
// chunks 1..3 on workers. Each chunk sleeps a little so the throwers and non-throwers overlap.
void expect_lowest_thrower_wins(ThreadPool& pool, const std::vector<int>& throwers) {
  std::atomic<int> finished{0};
  try {
    pool.parallel_for(4, 1, [&](int64_t b, int64_t) {
      const int c = int(b);
      if (c != throwers.back()) std::this_thread::sleep_for(std::chrono::microseconds(20 * (c + 1)));
      ++finished;
      for (int t : throwers)
        if (t == c) throw Error("chunk " + std::to_string(c));
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "chunk " + std::to_string(throwers.front()));
  }
  // Every chunk ran to its end before parallel_for returned (no worker still using the job).
  EXPECT_EQ(finished.load(), 4);
}

TEST(ThreadPool, RethrowsTheLowestChunksExceptionAfterAllChunksFinish) {
  ThreadPool pool(4);
  const std::vector<std::vector<int>> cases = {{0}, {2}, {3}, {1, 3}, {0, 2}, {2, 3}, {0, 1, 2, 3}};
  for (int rep = 0; rep < 1000; ++rep)
    for (const auto& throwers : cases) expect_lowest_thrower_wins(pool, throwers);
  // The pool is still usable afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedCallsRunInlineAndPropagate) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(3, 1,
                                 [&](int64_t b, int64_t) {
                                   pool.parallel_for(10, 1, [&](int64_t, int64_t) {
                                     if (b == 2) throw Error("inner");
                                   });
                                 }),
               Error);
}

}  // namespace
}  // namespace hytra
