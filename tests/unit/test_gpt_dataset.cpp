// GPTDataset sampling against numpy (known RandomState outputs, and an independent numpy
// rendition of docs/spec/gpt_dataset.md in gpt_dataset_ref.py), its worked example (§5), split rounding,
// epochs, empty documents, blending and its weights, and tokens outside the vocabulary.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include <unistd.h>

#include "core/error.h"
#include "data/gpt_data.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/md5.h"
#include "data/mt19937.h"
#include "data/npy.h"
#include "common/error_of.h"

namespace hytra {
namespace {

TEST(RandomState, MatchesNumpy) {
  // numpy.random.RandomState(s).randint(0, 2**32, size=3, dtype=numpy.uint32) (raw outputs).
  RandomState a(5489), b(1234);
  EXPECT_EQ(a.next_u32(), 3499211612u);
  EXPECT_EQ(a.next_u32(), 581869302u);
  EXPECT_EQ(a.next_u32(), 3890346734u);
  EXPECT_EQ(b.next_u32(), 822569775u);
  EXPECT_EQ(b.next_u32(), 2137449171u);
  EXPECT_EQ(b.next_u32(), 2671936806u);
  // a = numpy.arange(10, dtype=numpy.int32); numpy.random.RandomState(42).shuffle(a)
  std::vector<int32_t> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  RandomState c(42);
  c.shuffle(v.data(), 10);
  EXPECT_EQ(v, (std::vector<int32_t>{8, 1, 5, 0, 7, 2, 9, 4, 3, 6}));
}

TEST(GptDataset, WorkedExampleSampleIndex) {
  // docs/spec/gpt_dataset.md §5: lengths 5, 3, 7 in document order, L = 4 -> rows (0,0), (0,4), (2,0), (2,4):
  // samples d0[0:5]; d0[4], d1[0:3], d2[0]; d2[0:5].
  EXPECT_EQ(build_sample_index({5, 3, 7}, {0, 1, 2}, 4, 15), (std::vector<int64_t>{0, 0, 0, 4, 2, 0, 2, 4}));
  // An empty document is skipped over: lengths 2, 0, 4 with L = 2 -> (0,0), (2,0), (2,2).
  EXPECT_EQ(build_sample_index({2, 0, 4}, {0, 1, 2}, 2, 6), (std::vector<int64_t>{0, 0, 2, 0, 2, 2}));
}

TEST(GptDataset, SplitRoundsHalfToEven) {
  auto r = split_ranges("969, 30, 1", 1000);
  EXPECT_EQ(r[0]->begin, 0);
  EXPECT_EQ(r[0]->end, 969);
  EXPECT_EQ(r[1]->end, 999);
  EXPECT_EQ(r[2]->end, 1000);
  r = split_ranges("1,2,1", 10);  // bookends 2.5 and 7.5 -> 2 and 8
  EXPECT_EQ(r[0]->end, 2);
  EXPECT_EQ(r[1]->begin, 2);
  EXPECT_EQ(r[1]->end, 8);
  r = split_ranges("100", 7);  // padded with zeros: no valid and no test split
  EXPECT_EQ(r[0]->end, 7);
  EXPECT_FALSE(r[1]);
  EXPECT_FALSE(r[2]);
  EXPECT_THROW(split_ranges("0,0,0", 7), Error);
  EXPECT_THROW(split_ranges("a,b", 7), Error);
}

TEST(GptDataset, EmptySplitAskedForSamplesIsANamedError) {
  try {
    build_gpt_indices({0, 0, 5}, SplitRange{0, 2}, 4, 3, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no tokens"), std::string::npos) << e.what();
  }
}

TEST(GptDataset, BlendingIsGreedyOnWeights) {
  auto a = std::make_shared<InMemorySequences>(std::vector<std::vector<int32_t>>{{1, 1, 1, 1, 1, 1, 1, 1, 1}});
  auto b = std::make_shared<InMemorySequences>(std::vector<std::vector<int32_t>>{{2, 2, 2, 2, 2, 2, 2, 2, 2}});
  auto da = std::make_shared<GptDataset>(a, SplitRange{0, 1}, 2, std::nullopt, 3);
  auto db = std::make_shared<GptDataset>(b, SplitRange{0, 1}, 2, std::nullopt, 3);
  BlendedDataset blend({da, db}, {1.0, 1.0}, 4);
  // s=0: errors .5/.5 tie -> 0; s=1: -.5/.5 -> 1; s=2: 0/0 -> 0; s=3: -.5/.5 -> 1.
  std::vector<int32_t> first;
  for (int64_t s = 0; s < 4; ++s) first.push_back(blend.sample(s)[0]);
  EXPECT_EQ(first, (std::vector<int32_t>{1, 2, 1, 2}));
  EXPECT_EQ(BlendedDataset::per_dataset_sizes({0.3, 0.7}, 1000), (std::vector<int64_t>{302, 704}));
}

using test::error_of;

TEST(GptDataset, TokensOutsideTheVocabularyAreNamedErrors) {
  // Vocabulary 300 (padded to 384 by the model): token 300 would train an unused padded row.
  const std::string prefix = testing::TempDir() + "hytra_oov";
  IndexedDatasetWriter w(prefix, TokenDtype::U16);
  w.add_document({1, 2, 3, 4, 5, 6, 7, 8});
  w.add_document({9, 10, 300, 11, 12, 13, 14, 15});
  w.finalize();
  auto src = std::make_shared<IndexedDataset>(prefix);
  GptDataset ok(src, SplitRange{0, 2}, 3, std::nullopt, 1, {}, 301);
  for (int64_t i = 0; i < ok.size(); ++i) EXPECT_NO_THROW(ok.sample(i));
  GptDataset ds(src, SplitRange{0, 2}, 3, std::nullopt, 1, {}, 300);
  std::string msg;
  for (int64_t i = 0; i < ds.size() && msg.empty(); ++i) msg = error_of([&] { ds.sample(i); });
  EXPECT_NE(msg.find(prefix + ".bin: token 300 (sequence 1, token 2; dataset item "), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the vocabulary [0, 300)"), std::string::npos) << msg;
  // Through --data-path, as training builds it.
  const std::string from_splits = error_of([&] {
    const auto splits = build_gpt_splits({prefix}, "1", 3, 1, {std::nullopt, std::nullopt, std::nullopt},
                                         testing::TempDir() + "hytra_oov_cache", 300);
    for (int64_t i = 0; i < splits[0].size; ++i) splits[0].data->sample(i);
  });
  EXPECT_NE(from_splits.find("token 300"), std::string::npos) << from_splits;
  // Negative tokens too (signed dtypes).
  auto neg = std::make_shared<InMemorySequences>(std::vector<std::vector<int32_t>>{{1, 2, -4, 3, 5}});
  GptDataset nds(neg, SplitRange{0, 1}, 4, std::nullopt, 1, {}, 300);
  EXPECT_NE(error_of([&] { nds.sample(0); }).find("in-memory sequences: token -4"), std::string::npos);
}

TEST(GptDataset, BlendWeightsMustBeFiniteNonNegativeAndNotAllZero) {
  const std::string prefix = testing::TempDir() + "hytra_blend";
  IndexedDatasetWriter w(prefix, TokenDtype::U16);
  for (int d = 0; d < 20; ++d) w.add_document(std::vector<int32_t>(10, d));
  w.finalize();
  auto build = [&](const std::string& w1, const std::string& w2) {
    return error_of([&] {
      build_gpt_splits({w1, prefix, w2, prefix}, "90,10,0", 4, 1, {8, 8, 0}, testing::TempDir() + "hytra_blend_cache");
    });
  };
  const std::string zero = build("0", "0");
  EXPECT_NE(zero.find("--data-path: the blend weights are all zero"), std::string::npos) << zero;
  for (const char* bad : {"-1", "nan", "inf", "x"}) {
    const std::string msg = build(bad, "1");
    EXPECT_NE(msg.find("--data-path: expected a finite non-negative weight"), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_EQ(build("0", "1"), "");  // one zero weight is fine
  auto one = std::make_shared<InMemorySequences>(std::vector<std::vector<int32_t>>{{1, 1, 1, 1, 1}});
  auto member = std::make_shared<GptDataset>(one, SplitRange{0, 1}, 2, std::nullopt, 3);
  const std::vector<std::shared_ptr<const SampleSource>> two = {member, member};
  EXPECT_NE(error_of([&] { BlendedDataset(two, {0.0, 0.0}, 4); }).find("--data-path"), std::string::npos);
  EXPECT_NE(error_of([&] { BlendedDataset::per_dataset_sizes({0.0, 0.0}, 4); }).find("all zero"), std::string::npos);
}

TEST(IndexCache, Md5MatchesRfc1321) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex("The quick brown fox jumps over the lazy dog"), "9e107d9d372bb6826bd81d3542a419d6");
  EXPECT_EQ(md5_hex(std::string(1000, 'a')), "cabe45dcc9ae5b66ba86600cca6b8ba8");
}

TEST(IndexCache, NpyRoundTripAndNumpyInterop) {
  const std::string p = testing::TempDir() + "hytra_t.npy";
  write_npy(p, {"<i4", {3, 2}, {0, 0, -1, 4, 2, 7}});
  NpyArray a = read_npy(p);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.values, (std::vector<int64_t>{0, 0, -1, 4, 2, 7}));
  std::ifstream f(p, std::ios::binary);
  std::string head(10, ' ');
  f.read(head.data(), 10);
  const size_t hlen = size_t(uint8_t(head[8])) | size_t(uint8_t(head[9])) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);  // header padded to a multiple of 64 bytes
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) GTEST_SKIP() << "python3-numpy missing";
  const std::string q = testing::TempDir() + "hytra_np.npy";
  const std::string cmd = "/usr/bin/python3 -c \"import numpy; a = numpy.load('" + p +
                          "'); assert a.tolist() == [[0, 0], [-1, 4], [2, 7]], a; numpy.save('" + q +
                          "', numpy.arange(5, dtype=numpy.uint32)[::-1].copy())\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  NpyArray b = read_npy(q);
  EXPECT_EQ(b.descr, "<u4");
  EXPECT_EQ(b.values, (std::vector<int64_t>{4, 3, 2, 1, 0}));
}

TEST(IndexCache, SecondBuildReadsTheCache) {
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < 50; ++s) seqs.push_back(std::vector<int32_t>(size_t(3 + s % 7), s));
  auto src = std::make_shared<InMemorySequences>(seqs);
  const std::string dir = testing::TempDir() + "hytra_cache_" + std::to_string(::getpid());
  IndexCache cache{dir, "mem", "train"};
  GptDataset a(src, SplitRange{0, 45}, 8, 120, 9, cache), b(src, SplitRange{0, 45}, 8, 120, 9, cache);
  GptDataset other_seed(src, SplitRange{0, 45}, 8, 120, 10, cache);
  EXPECT_FALSE(a.loaded_from_cache());
  EXPECT_TRUE(b.loaded_from_cache());
  EXPECT_FALSE(other_seed.loaded_from_cache());  // another description, another hash
  EXPECT_EQ(a.indices().document_index, b.indices().document_index);
  EXPECT_EQ(a.indices().sample_index, b.indices().sample_index);
  EXPECT_EQ(a.indices().shuffle_index, b.indices().shuffle_index);
  for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.sample(i), b.sample(i));
}

// Runs gpt_dataset_ref.py on the configs (one JSON per line); returns its output lines.
std::vector<std::string> run_reference(const std::vector<std::string>& configs) {
  const std::string in_path = testing::TempDir() + "gpt_ref_in.jsonl", out_path = testing::TempDir() + "gpt_ref_out.jsonl";
  {
    std::ofstream in(in_path);
    for (const auto& c : configs) in << c << "\n";
  }
  const std::string cmd = std::string("/usr/bin/python3 ") + HYTRA_SOURCE_DIR + "/tests/unit/gpt_dataset_ref.py < " +
                          in_path + " > " + out_path;
  if (std::system(cmd.c_str()) != 0) return {};
  std::ifstream out(out_path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(out, l);) lines.push_back(l);
  return lines;
}

std::string json_ints(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str() + "]";
}

TEST(GptDataset, MatchesTheNumpyReference) {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) GTEST_SKIP() << "python3-numpy missing";
  struct Cfg {
    std::vector<int64_t> lengths;
    std::string split;
    int which;
    int64_t L;
    uint32_t seed;
    int64_t num_samples;  // -1 = None
  };
  std::vector<Cfg> cfgs;
  // Many small documents, one and several epochs, with and without a separate final epoch.
  std::vector<int64_t> many;
  for (int i = 0; i < 300; ++i) many.push_back((i * 37) % 23);  // includes empty documents (0)
  for (uint32_t seed : {0u, 42u, 1234u}) {
    cfgs.push_back({many, "969,30,1", 0, 16, seed, -1});
    cfgs.push_back({many, "969,30,1", 0, 16, seed, 900});   // several epochs
    cfgs.push_back({many, "90,10", 1, 8, seed, 200});       // valid split
    cfgs.push_back({many, "969,30,1", 0, 16, seed, 640});   // just over two epochs: separate final
  }
  cfgs.push_back({{5, 3, 7}, "1", 0, 4, 7, -1});
  std::vector<std::string> lines;
  for (const auto& c : cfgs)
    lines.push_back("{\"lengths\": " + json_ints(c.lengths) + ", \"split\": \"" + c.split + "\", \"which\": " +
                    std::to_string(c.which) + ", \"seq_length\": " + std::to_string(c.L) + ", \"seed\": " +
                    std::to_string(c.seed) + ", \"num_samples\": " +
                    (c.num_samples < 0 ? std::string("null") : std::to_string(c.num_samples)) + "}");
  const std::vector<std::string> ref = run_reference(lines);
  ASSERT_EQ(ref.size(), cfgs.size()) << "reference script failed";
  bool saw_separate = false, saw_multi = false;
  for (size_t k = 0; k < cfgs.size(); ++k) {
    const Cfg& c = cfgs[k];
    std::vector<std::vector<int32_t>> seqs;
    for (size_t s = 0; s < c.lengths.size(); ++s) {
      std::vector<int32_t> t;
      for (int64_t p = 0; p < c.lengths[s]; ++p) t.push_back(int32_t(1000 * s + p));
      seqs.push_back(t);
    }
    auto src = std::make_shared<InMemorySequences>(seqs);
    const SplitRange range = *split_ranges(c.split, int64_t(c.lengths.size()))[size_t(c.which)];
    GptDataset ds(src, range, c.L, c.num_samples < 0 ? std::nullopt : std::optional<int64_t>(c.num_samples), c.seed);
    const GptIndices& idx = ds.indices();
    saw_separate |= idx.separate_final_epoch;
    saw_multi |= idx.num_epochs > 1;
    std::vector<int64_t> doc(idx.document_index.begin(), idx.document_index.end());
    std::ostringstream samples;
    samples << "[";
    for (int64_t i = 0; i < std::min<int64_t>(8, ds.size()); ++i) {
      std::vector<int32_t> s = ds.sample(i);
      samples << (i ? ", " : "") << json_ints(std::vector<int64_t>(s.begin(), s.end()));
    }
    samples << "]";
    const std::string mine = "{\"document_index\": " + json_ints(doc) + ", \"sample_index\": " +
                             json_ints(idx.sample_index) + ", \"shuffle_index\": " + json_ints(idx.shuffle_index) +
                             ", \"samples\": " + samples.str() + "}";
    EXPECT_EQ(mine, ref[k]) << "config " << k << ": " << lines[k];
  }
  EXPECT_TRUE(saw_multi);
  EXPECT_TRUE(saw_separate);
}

}  // namespace
}  // namespace hytra
