// The parallel layout against Megatron-Core's numbering (the examples in parallel_state's documentation of
// initialize_model_parallel), the expert layout, and the errors for sizes that do not divide the world.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "dist/parallel_dims.h"

namespace hytra::dist {
namespace {

using test::error_of;
using Groups = std::vector<std::vector<int>>;

// 16 ranks, tp 2, pp 4 (so dp 2): Megatron's documented example.
TEST(ParallelDims, MegatronDocumentedExample) {
  const ParallelDims d = ParallelDims::make(16, {.tp = 2, .pp = 4});
  EXPECT_EQ(d.dp, 2);
  const RankLayout l = d.dense();
  EXPECT_EQ(l.groups("tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(l.groups("pp"), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(l.groups("dp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  // Model parallel (tp-pp): the ranks of one replica, tp fastest.
  EXPECT_EQ(l.groups("tp-pp"), (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  // Rank 11: the second of data group 5 ([9, 11]); the third of pipeline group 3 ([3, 7, 11, 15]).
  EXPECT_EQ(l.membership(11, "dp").group, 5);
  EXPECT_EQ(l.membership(11, "dp").position, 1);
  EXPECT_EQ(l.membership(11, "pp").group, 3);
  EXPECT_EQ(l.membership(11, "pp").position, 2);
}

// 8 ranks, tp 2, cp 2 (dp 2): the data-parallel groups with and without the context-parallel ranks.
TEST(ParallelDims, ContextParallelSitsBetweenTensorAndData) {
  const RankLayout l = ParallelDims::make(8, {.tp = 2, .cp = 2}).dense();
  EXPECT_EQ(l.groups("cp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.groups("dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.groups("dp-cp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

// 8 ranks, tp 2, ep 4: the experts use tp as their expert tp (Megatron's default), ep next, expert dp 1.
TEST(ParallelDims, ExpertLayoutHasItsOwnDataParallelSize) {
  const ParallelDims d = ParallelDims::make(8, {.tp = 2, .ep = 4});
  EXPECT_EQ(d.dp, 4);
  EXPECT_EQ(d.edp, 1);
  const RankLayout e = d.expert();
  EXPECT_EQ(e.groups("ep"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(e.groups("dp"), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  const ParallelDims d1 = ParallelDims::make(8, {.tp = 2, .ep = 2, .etp = 1});
  EXPECT_EQ(d1.edp, 4);
  EXPECT_EQ(d1.expert().groups("ep"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(d1.expert().groups("dp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(ParallelDims, OneProcessIsOneOfEverything) {
  const ParallelDims d = ParallelDims::make(1, {});
  EXPECT_EQ(d.dp, 1);
  EXPECT_EQ(d.dense().groups("dp"), (Groups{{0}}));
}

TEST(ParallelDims, SizesThatDoNotDivideTheWorldAreNamed) {
  const std::string e = error_of([] { ParallelDims::make(6, {.tp = 4}); });
  EXPECT_NE(e.find("world size 6"), std::string::npos) << e;
  EXPECT_NE(e.find("--tensor-model-parallel-size (4)"), std::string::npos) << e;
  const std::string x = error_of([] { ParallelDims::make(6, {.ep = 4}); });
  EXPECT_NE(x.find("--expert-model-parallel-size (4)"), std::string::npos) << x;
  const std::string z = error_of([] { ParallelDims::make(4, {.pp = 0}); });
  EXPECT_NE(z.find("--pipeline-model-parallel-size must be at least 1"), std::string::npos) << z;
}

}  // namespace
}  // namespace hytra::dist
