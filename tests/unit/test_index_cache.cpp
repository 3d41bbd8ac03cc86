// The GPTDataset index cache is checked before use (index_cache.h): a stale cache left by an earlier
// dataset at the same prefix, corrupt values with valid .npy framing and a modified array are
// rebuilt with a warning naming the file, the rebuilt samples equal a fresh build; a cache without
// hytra's sidecar (Megatron's) is used when its values are in range; a stale cache that cannot be
// rewritten is a named error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>

#include "core/error.h"
#include "data/gpt_dataset.h"
#include "data/index_cache.h"
#include "data/indexed_dataset.h"
#include "data/npy.h"

namespace hytra {
namespace {

constexpr int64_t kSeqLength = 16, kNumSamples = 300;
constexpr uint32_t kSeed = 7;
const SplitRange kRange{0, 45};

std::string test_dir(const std::string& name) {
  const std::string d = testing::TempDir() + "hytra_cache_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// 50 documents at `prefix`, lengths min_len .. min_len + 9, token ids varying with `salt`.
std::shared_ptr<IndexedDataset> write_dataset(const std::string& prefix, int min_len, int salt) {
  IndexedDatasetWriter w(prefix, TokenDtype::U16);
  for (int d = 0; d < 50; ++d) {
    std::vector<int32_t> t(size_t(min_len + (d * 7 + salt) % 10));
    for (size_t k = 0; k < t.size(); ++k) t[k] = int32_t((d * 31 + int(k) + salt) % 1000);
    w.add_document(t);
  }
  w.finalize();
  return std::make_shared<IndexedDataset>(prefix);
}

struct Cached {
  std::string dir;
  IndexCache cache;
  std::string base;  // path prefix of the cache files

  explicit Cached(const std::string& name) : dir(test_dir(name)), cache{dir + "/cache", dir + "/ds", "train"} {
    base = cache_base(cache, cache_description(cache, kRange, kSeqLength, kNumSamples, kSeed));
  }
  // Builds (or reads) the dataset; `warnings` gets what it printed to stderr.
  GptDataset open(std::shared_ptr<IndexedDataset> src, std::string* warnings = nullptr) const {
    testing::internal::CaptureStderr();
    GptDataset ds(src, kRange, kSeqLength, kNumSamples, kSeed, cache);
    const std::string err = testing::internal::GetCapturedStderr();
    if (warnings) *warnings = err;
    return ds;
  }
};

void expect_same_samples(const GptDataset& a, const GptDataset& b) {
  EXPECT_EQ(a.indices().document_index, b.indices().document_index);
  EXPECT_EQ(a.indices().sample_index, b.indices().sample_index);
  EXPECT_EQ(a.indices().shuffle_index, b.indices().shuffle_index);
  ASSERT_EQ(a.size(), b.size());
  for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.sample(i), b.sample(i)) << "item " << i;
}

// Rewrites one cached array with valid framing (same dtype and shape) but changed values.
void corrupt(const std::string& path, const std::function<void(std::vector<int64_t>&)>& change) {
  NpyArray a = read_npy(path);
  change(a.values);
  write_npy(path, a);
}

TEST(IndexCache, WritesASidecarAndReadsItsOwnCacheBack) {
  Cached c("own");
  auto src = write_dataset(c.dir + "/ds", 5, 0);
  const GptDataset first = c.open(src);
  std::string warnings;
  const GptDataset second = c.open(src, &warnings);
  EXPECT_FALSE(first.loaded_from_cache());
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(warnings, "");
  EXPECT_TRUE(std::filesystem::exists(c.base + "hytra_checksums.txt"));
  EXPECT_GT(first.indices().num_epochs, 1);  // the checks see several epochs
  expect_same_samples(first, second);
}

TEST(IndexCache, StaleCacheAfterReprocessingIntoTheSamePrefixIsRebuilt) {
  for (bool sidecar : {true, false}) {
    Cached c(sidecar ? "stale" : "stale_megatron");
    c.open(write_dataset(c.dir + "/ds", 5, 0));
    if (!sidecar) std::filesystem::remove(c.base + "hytra_checksums.txt");
    // The same prefix, the same number of documents (so the same description), longer documents.
    auto src = write_dataset(c.dir + "/ds", 30, 3);
    std::string warnings;
    const GptDataset ds = c.open(src, &warnings);
    EXPECT_FALSE(ds.loaded_from_cache()) << sidecar;
    EXPECT_NE(warnings.find(c.base + (sidecar ? "hytra_checksums.txt" : "document_index.npy")), std::string::npos)
        << warnings;
    EXPECT_NE(warnings.find("rebuilding the index cache"), std::string::npos) << warnings;
    expect_same_samples(ds, GptDataset(src, kRange, kSeqLength, kNumSamples, kSeed));
    EXPECT_TRUE(c.open(src).loaded_from_cache());  // rewritten: used from now on
  }
}

TEST(IndexCache, OutOfRangeValuesWithValidFramingAreRebuilt) {
  struct Case {
    const char* file;
    std::function<void(std::vector<int64_t>&)> change;
  };
  const std::vector<Case> cases = {
      {"shuffle_index.npy", [](auto& v) { v.assign(v.size(), int64_t(1) << 31); }},
      {"shuffle_index.npy", [](auto& v) { v.back() = int64_t(v.size()); }},
      {"sample_index.npy", [](auto& v) { for (size_t k = 2; k < v.size(); k += 2) v[k] = 1000000000; }},
      {"sample_index.npy", [](auto& v) { v[3] = 1000000000; }},  // an offset past its sequence
      {"sample_index.npy", [](auto& v) { std::swap(v[2], v[4]); }},  // positions out of order
      {"document_index.npy", [](auto& v) { v[0] = 1000000; }},
      {"document_index.npy", [](auto& v) { v[0] = kRange.end; }},  // a sequence outside the split
  };
  for (bool sidecar : {true, false}) {
    for (size_t k = 0; k < cases.size(); ++k) {
      Cached c("range" + std::to_string(k) + (sidecar ? "" : "_megatron"));
      auto src = write_dataset(c.dir + "/ds", 5, 0);
      const GptDataset fresh = c.open(src);
      if (!sidecar) std::filesystem::remove(c.base + "hytra_checksums.txt");
      corrupt(c.base + cases[k].file, cases[k].change);
      std::string warnings;
      const GptDataset ds = c.open(src, &warnings);
      EXPECT_FALSE(ds.loaded_from_cache()) << k;
      EXPECT_NE(warnings.find(c.base + cases[k].file), std::string::npos) << k << ": " << warnings;
      expect_same_samples(ds, fresh);
    }
  }
}

TEST(IndexCache, InRangeButWrongValuesAreCaught) {
  // An all-zeros shuffle index: valid framing, every entry in range. The sidecar's checksum catches
  // it (and without the sidecar, the permutation check does).
  for (bool sidecar : {true, false}) {
    Cached c(sidecar ? "zeros" : "zeros_megatron");
    auto src = write_dataset(c.dir + "/ds", 5, 0);
    const GptDataset fresh = c.open(src);
    if (!sidecar) std::filesystem::remove(c.base + "hytra_checksums.txt");
    corrupt(c.base + "shuffle_index.npy", [](auto& v) { v.assign(v.size(), 0); });
    std::string warnings;
    const GptDataset ds = c.open(src, &warnings);
    EXPECT_FALSE(ds.loaded_from_cache());
    EXPECT_NE(warnings.find(c.base + "shuffle_index.npy"), std::string::npos) << warnings;
    expect_same_samples(ds, fresh);
  }
  // Another valid permutation (two entries swapped): only the checksum can tell.
  Cached c("swapped");
  auto src = write_dataset(c.dir + "/ds", 5, 0);
  const GptDataset fresh = c.open(src);
  corrupt(c.base + "shuffle_index.npy", [](auto& v) { std::swap(v[0], v[1]); });
  std::string warnings;
  const GptDataset ds = c.open(src, &warnings);
  EXPECT_FALSE(ds.loaded_from_cache());
  EXPECT_NE(warnings.find("differ from the checksum"), std::string::npos) << warnings;
  expect_same_samples(ds, fresh);
}

TEST(IndexCache, CacheWithoutSidecarIsUsedWhenInRange) {
  // Megatron writes no sidecar: its values are trusted once they pass the range checks.
  Cached c("no_sidecar");
  auto src = write_dataset(c.dir + "/ds", 5, 0);
  const GptDataset fresh = c.open(src);
  std::filesystem::remove(c.base + "hytra_checksums.txt");
  std::string warnings;
  const GptDataset ds = c.open(src, &warnings);
  EXPECT_TRUE(ds.loaded_from_cache());
  EXPECT_EQ(warnings, "");
  expect_same_samples(ds, fresh);
}

TEST(IndexCache, DamagedFilesAreRebuilt) {
  Cached c("damaged");
  auto src = write_dataset(c.dir + "/ds", 5, 0);
  const GptDataset fresh = c.open(src);
  std::filesystem::resize_file(c.base + "sample_index.npy", 200);  // truncated
  std::string warnings;
  const GptDataset ds = c.open(src, &warnings);
  EXPECT_FALSE(ds.loaded_from_cache());
  EXPECT_NE(warnings.find(c.base + "sample_index.npy"), std::string::npos) << warnings;
  expect_same_samples(ds, fresh);
  std::filesystem::resize_file(c.base + "hytra_checksums.txt", 10);  // a damaged sidecar
  const GptDataset again = c.open(src, &warnings);
  EXPECT_FALSE(again.loaded_from_cache());
  EXPECT_NE(warnings.find(c.base + "hytra_checksums.txt: not a hytra checksum file"), std::string::npos) << warnings;
  expect_same_samples(again, fresh);
}

TEST(IndexCache, StaleCacheThatCannotBeRewrittenIsANamedError) {
  Cached c("readonly");
  auto src = write_dataset(c.dir + "/ds", 5, 0);
  c.open(src);
  corrupt(c.base + "shuffle_index.npy", [](auto& v) { v.assign(v.size(), int64_t(1) << 31); });
  // A directory where the rewrite's temporary file goes (core/atomic_file.h names it PATH.tmp-PID):
  // unwritable even for root.
  std::filesystem::create_directories(c.base + "document_index.npy.tmp-" + std::to_string(getpid()));
  testing::internal::CaptureStderr();
  try {
    GptDataset ds(src, kRange, kSeqLength, kNumSamples, kSeed, c.cache);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(c.base + "shuffle_index.npy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cannot be rebuilt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--data-cache-path"), std::string::npos) << msg;
  }
  testing::internal::GetCapturedStderr();
}

TEST(IndexCache, NpyShapesThatCannotFitAreNamedErrors) {
  // A header claiming 2^62 elements over no data: the element count must not overflow.
  const std::string p = testing::TempDir() + "hytra_huge.npy";
  std::string header = "{'descr': '<u4', 'fortran_order': False, 'shape': (4611686018427387904,), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + char(0) + header;
  std::FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  try {
    read_npy(p);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": the header's shape"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hytra
