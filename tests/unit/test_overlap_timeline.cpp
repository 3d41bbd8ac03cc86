// The EP-overlap timeline's interval arithmetic (train/overlap_timeline.h): busy periods merged, a stream's waits cut
// out of its turns, and the time two streams were busy at once; and the timeline of a CPU step, where a blocking
// transfer is both the communication's busy time and the computation's wait (nothing hidden).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "train/overlap_timeline.h"

namespace hytra {
namespace {

std::vector<Interval> iv(std::initializer_list<std::pair<double, double>> v) {
  std::vector<Interval> out;
  for (auto [b, e] : v) out.push_back({b, e});
  return out;
}

void expect_intervals(const std::vector<Interval>& got, const std::vector<Interval>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_DOUBLE_EQ(got[i].begin, want[i].begin) << i;
    EXPECT_DOUBLE_EQ(got[i].end, want[i].end) << i;
  }
}

TEST(OverlapTimeline, MergeSortsJoinsTouchingAndDropsEmpty) {
  expect_intervals(merge_intervals(iv({{5, 7}, {1, 3}, {2, 4}, {4, 4.5}, {6, 6}, {9, 8}})), iv({{1, 4.5}, {5, 7}}));
  EXPECT_DOUBLE_EQ(total_length(iv({{1, 4.5}, {5, 7}})), 5.5);
}

TEST(OverlapTimeline, SubtractCutsWaitsOutOfTurns) {
  expect_intervals(subtract_intervals(iv({{0, 10}, {12, 20}}), iv({{2, 3}, {9, 13}, {15, 16}, {25, 30}})),
                   iv({{0, 2}, {3, 9}, {13, 15}, {16, 20}}));
  expect_intervals(subtract_intervals(iv({{0, 4}}), iv({{-1, 5}})), {});
  expect_intervals(subtract_intervals(iv({{0, 4}}), {}), iv({{0, 4}}));
}

TEST(OverlapTimeline, OverlapCountsTimeBothAreBusy) {
  EXPECT_DOUBLE_EQ(overlap_length(iv({{0, 4}, {6, 10}}), iv({{3, 7}, {9, 12}})), 1 + 1 + 1);
  EXPECT_DOUBLE_EQ(overlap_length(iv({{0, 1}}), iv({{1, 2}})), 0);
  EXPECT_DOUBLE_EQ(overlap_length(iv({{0, 10}}), iv({{2, 3}, {4, 6}})), 3);
}

TEST(OverlapTimeline, ACpuStepHidesNothing) {
  OverlapTimeline t(Exec::cpu(), nullptr);
  t.begin_step();
  for (int i = 0; i < 2; ++i) {
    t.begin_turn();
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    t.end_turn();
  }
  t.end_step();
  const OverlapTimeline::Summary& s = t.last();
  EXPECT_GE(s.compute_ms, 5.0);
  EXPECT_GE(s.step_ms, s.compute_ms);
  EXPECT_EQ(s.transfers, 0);
  EXPECT_EQ(s.comm_ms, 0.0);
  EXPECT_EQ(s.hidden_ms, 0.0);
  EXPECT_NE(ep_overlap_line(7, s).find("iteration 7: step "), std::string::npos);
}

}  // namespace
}  // namespace hytra
