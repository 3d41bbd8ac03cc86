// The pipeline schedules (train/pipeline_schedule.h): Megatron's 1F1B and interleaved orders written out by
// hand for small cases, and for a grid of sizes the properties a runtime relies on: each micro-batch's forward
// and backward exactly once a chunk, the forward first; the ranks together never wait on each other forever (a
// simulation that runs an action once the stage before it has sent its activation, or the stage after it its
// gradient); a rank of the plain schedule holds at most P - r micro-batches.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "train/pipeline_schedule.h"

namespace hytra {
namespace {

std::string order(int64_t stages, int64_t rank, int64_t micro, int64_t chunks) {
  std::string s;
  for (const PipelineAction& a : pipeline_schedule(stages, rank, micro, chunks))
    s += (s.empty() ? "" : " ") + a.text(chunks > 1);
  return s;
}

TEST(PipelineSchedule, OneFOneBByHand) {
  EXPECT_EQ(order(4, 0, 8, 1), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(order(4, 2, 8, 1), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(order(4, 3, 3, 1), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(order(4, 0, 2, 1), "F0 F1 B0 B1");  // fewer micro-batches than stages: warm-up capped
  EXPECT_EQ(order(1, 0, 3, 1), "F0 B0 F1 B1 F2 B2");
}

TEST(PipelineSchedule, InterleavedByHand) {
  // P = 2, V = 2, M = 4: virtual micro-batches in groups of P a chunk; rank 0 warms up 2 + 2 of them.
  EXPECT_EQ(order(2, 0, 4, 2), "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(order(2, 1, 4, 2), "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // M = P: every forward first.
  EXPECT_EQ(order(2, 1, 2, 2), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

// Runs every rank's actions in order, each once its input exists: a forward on virtual stage s (chunk c of rank
// r: s = c P + r) after the forward of s - 1, a backward after the backward of s + 1 (the last stage: after its
// own forward). Returns false if the ranks stop with actions left.
bool runs_through(int64_t P, int64_t M, int64_t V, bool combined = false) {
  std::vector<std::vector<PipelineAction>> plan;
  for (int64_t r = 0; r < P; ++r) plan.push_back(pipeline_schedule(P, r, M, V, combined));
  std::set<std::tuple<bool, int64_t, int64_t>> done;  // (forward, micro, virtual stage)
  std::vector<size_t> next(size_t(P), 0);
  const int64_t S = P * V;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < P; ++r) {
      while (next[size_t(r)] < plan[size_t(r)].size()) {
        const PipelineAction& a = plan[size_t(r)][next[size_t(r)]];
        const int64_t s = a.chunk * P + r;
        const bool ready =
            a.forward ? (s == 0 || done.count({true, a.micro, s - 1}))
                      : (s == S - 1 ? done.count({true, a.micro, s}) > 0 : done.count({false, a.micro, s + 1}) > 0);
        if (!ready) break;
        done.insert({a.forward, a.micro, s});
        ++next[size_t(r)];
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < P; ++r)
    if (next[size_t(r)] != plan[size_t(r)].size()) return false;
  return true;
}

TEST(PipelineSchedule, EveryPassOnceForwardFirstAndNoDeadlock) {
  for (int64_t P : {1, 2, 3, 4, 8})
    for (int64_t V : {1, 2, 3})
      for (int64_t M : {1, 2, 3, 4, 6, 8, 12, 16}) {
        if (V > 1 && M % P != 0) continue;
        for (int64_t r = 0; r < P; ++r) {
          std::map<std::pair<int64_t, int64_t>, int> state;  // (micro, chunk) -> 1 after F, 2 after B
          int64_t live = 0, peak = 0;
          for (const PipelineAction& a : pipeline_schedule(P, r, M, V)) {
            int& st = state[{a.micro, a.chunk}];
            ASSERT_EQ(st, a.forward ? 0 : 1)
                << "P " << P << " V " << V << " M " << M << " rank " << r << " " << a.text(V > 1);
            st = a.forward ? 1 : 2;
            live += a.forward ? 1 : -1;
            peak = std::max(peak, live);
          }
          ASSERT_EQ(int64_t(state.size()), M * V);
          for (const auto& [key, st] : state) ASSERT_EQ(st, 2);
          if (V == 1) {
            EXPECT_EQ(peak, std::min(P - r, M)) << "P " << P << " M " << M << " rank " << r;
          }
        }
        EXPECT_TRUE(runs_through(P, M, V)) << "P " << P << " V " << V << " M " << M;
      }
}

// Under the EP-overlap schedule each steady step's forward and backward form one combined pair: the warm-up is one
// forward longer, so no pair is one micro-batch's forward and backward (without it, the last rank's all are).
TEST(PipelineSchedule, CombinedPairsAreTwoMicroBatches) {
  std::string s;
  for (const PipelineAction& a : pipeline_schedule(2, 1, 4, 2, /*combined=*/true))
    s += (s.empty() ? "" : " ") + a.text(true);
  EXPECT_EQ(s, "F0.0 F1.0 F0.1 F1.1 B0.1 F2.0 B1.1 F3.0 B0.0 F2.1 B1.0 F3.1 B2.1 B3.1 B2.0 B3.0");
  for (int64_t P : {2, 3, 4})
    for (int64_t V : {2, 3})
      for (int64_t M : {P, 2 * P, 4 * P}) {
        for (int64_t r = 0; r < P; ++r) {
          const int64_t total = M * V, warmup = interleaved_warmup(P, r, M, V, true);
          EXPECT_EQ(warmup, M == P ? total : std::min(total, interleaved_warmup(P, r, M, V) + 1));
          for (int64_t i = 0; i < total - warmup; ++i) {
            const PipelineAction f = interleaved_action(P, V, warmup + i, true), b = interleaved_action(P, V, i, false);
            EXPECT_FALSE(f.micro == b.micro && f.chunk == b.chunk)
                << "P " << P << " V " << V << " M " << M << " r " << r;
          }
        }
        EXPECT_TRUE(runs_through(P, M, V, true)) << "P " << P << " V " << V << " M " << M;
      }
  // Without the extra forward the last rank's first steady pair is one micro-batch's.
  const int64_t w = interleaved_warmup(2, 1, 4, 2);
  EXPECT_EQ(interleaved_action(2, 2, w, true).micro, interleaved_action(2, 2, 0, false).micro);
  EXPECT_EQ(interleaved_action(2, 2, w, true).chunk, interleaved_action(2, 2, 0, false).chunk);
}

TEST(PipelineSchedule, BubbleAndNamedErrors) {
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 8, 2), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(1, 8, 1), 0.0);
  try {
    pipeline_schedule(4, 0, 6, 2);
    ADD_FAILURE() << "6 micro-batches interleaved over 4 stages";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs a multiple of --pipeline-model-parallel-size (4) micro-batches"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline_schedule(4, 4, 8, 1), Error);
  EXPECT_THROW(pipeline_schedule(4, 0, 0, 1), Error);
}

}  // namespace
}  // namespace hytra
