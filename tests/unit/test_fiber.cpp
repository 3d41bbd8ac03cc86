// Fibers (core/fiber.h), the EP-overlap schedule's way of interleaving two passes on one thread: two fibers resumed in
// turn run their steps in exactly the order the owner picks, keep their own stack frames across the switches, end with
// resume() answering false, and an exception thrown in one reaches the owner's resume() and ends that fiber.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/fiber.h"

namespace hytra {
namespace {

TEST(Fiber, TwoFibersInterleaveInTheOrderTheOwnerResumesThem) {
  std::string log;
  auto body = [&log](char name, int steps) {
    return [&log, name, steps] {
      int local = 0;  // lives on the fiber's own stack across the switches
      for (int i = 0; i < steps; ++i) {
        log += std::string(1, name) + std::to_string(local++);
        EXPECT_TRUE(Fiber::inside());
        if (i + 1 < steps) Fiber::yield();
      }
    };
  };
  Fiber a(body('a', 3)), b(body('b', 2));
  EXPECT_FALSE(Fiber::inside());
  EXPECT_TRUE(b.resume());
  EXPECT_TRUE(a.resume());
  EXPECT_TRUE(a.resume());
  EXPECT_FALSE(b.resume());
  EXPECT_TRUE(b.done());
  EXPECT_FALSE(a.done());
  EXPECT_FALSE(a.resume());
  EXPECT_EQ(log, "b0a0a1b1a2");
  EXPECT_THROW(a.resume(), Error);  // an ended fiber is not resumed again
}

TEST(Fiber, AnExceptionEndsTheFiberAndReachesTheOwner) {
  int reached = 0;
  Fiber f([&] {
    ++reached;
    Fiber::yield();
    ++reached;
    throw std::runtime_error("layer failed");
  });
  EXPECT_TRUE(f.resume());
  try {
    f.resume();
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "layer failed");
  }
  EXPECT_TRUE(f.done());
  EXPECT_EQ(reached, 2);
}

TEST(Fiber, YieldOutsideAFiberIsAnError) { EXPECT_THROW(Fiber::yield(), Error); }

}  // namespace
}  // namespace hytra
