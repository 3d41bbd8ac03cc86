#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "core/error.h"
#include "data/loader.h"
#include "data/mock_dataset.h"

namespace hytra {
namespace {

TEST(MockDataset, DocumentsCountUpAndEndWithEod) {
  MockDataset d(1000, 64, 7, 0);
  // Concatenate a few samples (they overlap by one token) and check the document structure:
  // after EOD the next document starts at 1, inside a document each token is the previous + 1.
  std::vector<int32_t> stream;
  for (int64_t i = 0; i < 20; ++i) {
    auto s = d.sample(i);
    ASSERT_EQ(s.size(), 65u);
    if (i > 0) {
      EXPECT_EQ(s[0], stream.back());
    }
    stream.insert(stream.end(), s.begin() + (i > 0 ? 1 : 0), s.end());
  }
  EXPECT_EQ(stream[0], 1);
  int eods = 0;
  for (size_t i = 1; i < stream.size(); ++i) {
    if (stream[i - 1] == MockDataset::kEod) {
      EXPECT_EQ(stream[i], 1) << "at " << i;
    } else if (stream[i] != MockDataset::kEod) {
      EXPECT_EQ(stream[i], stream[i - 1] + 1) << "at " << i;
    }
    eods += stream[i] == MockDataset::kEod;
  }
  EXPECT_GT(eods, 2);
}

TEST(MockDataset, SeedAndSplitChangeTheStreamDeterministically) {
  MockDataset a(1000, 32, 1, 0), b(1000, 32, 1, 0), c(1000, 32, 2, 0), v(1000, 32, 1, 1);
  EXPECT_EQ(a.sample(5), b.sample(5));
  bool differs_seed = false, differs_split = false;
  for (int64_t i = 0; i < 10; ++i) {
    differs_seed |= a.sample(i) != c.sample(i);
    differs_split |= a.sample(i) != v.sample(i);
  }
  EXPECT_TRUE(differs_seed);
  EXPECT_TRUE(differs_split);
}

// Indices whose tokens lie past int64 (a resumed manifest may hold any count) are a named error
// instead of a wrapped, negative stream position.
TEST(MockDataset, IndicesPastTheStreamAreRefused) {
  MockDataset d(50, 1 << 20, 3, 0);
  for (int64_t index : {INT64_MAX / 2, INT64_MAX}) {
    try {
      d.sample(index);
      ADD_FAILURE() << "no error for " << index;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("past the end of the mock stream"), std::string::npos) << e.what();
    }
  }
}

TEST(Loader, LabelsAreInputsShiftedByOne) {
  MockDataset d(50, 16, 3, 0);
  Batch b = load_batch(d, 4, 3);
  ASSERT_EQ(b.ids.shape(), (Shape{3, 16}));
  for (int64_t i = 0; i < 3; ++i) {
    auto s = d.sample(4 + i);
    for (int64_t t = 0; t < 16; ++t) {
      EXPECT_EQ(b.ids.data<int32_t>()[i * 16 + t], s[size_t(t)]);
      EXPECT_EQ(b.labels.data<int32_t>()[i * 16 + t], s[size_t(t + 1)]);
      EXPECT_LT(s[size_t(t)], 50);
    }
  }
  EXPECT_EQ(b.num_targets, 48);
}

}  // namespace
}  // namespace hytra
