// The readers fuzzed (fuzz/fuzz_targets.h): each target's seeds must load, then HYTRA_FUZZ_ITERATIONS (default 2,500;
// 25,000 a reader in the `slow` test) deterministic mutations of them (fuzz/mutator.h) must each load or end in a
// hytra::Error. Inputs under tests/fuzz/corpus/<target>/ (earlier findings, kept as regressions) run first. A
// finding is written to the work directory (finding-<target>-<n>) before the test fails; a crash ends the test run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/mutator.h"

namespace hytra::test {
namespace {
namespace fs = std::filesystem;

int64_t iterations() {
  const char* v = std::getenv("HYTRA_FUZZ_ITERATIONS");
  return v != nullptr ? std::atoll(v) : 2500;
}

std::string read(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs one input: true if the reader accepted it or refused it with hytra::Error.
bool survives(const FuzzTarget& t, const std::string& input, std::string& what) {
  try {
    t.run(input);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    what = e.what();
    return false;
  } catch (...) {
    what = "a non-standard exception";
    return false;
  }
  return true;
}

TEST(Fuzz, EveryReaderLoadsOrRefusesEveryMutation) {
  const std::string work = testing::TempDir() + "hytra_fuzz";
  fs::remove_all(work);
  const std::vector<FuzzTarget> targets = fuzz_targets(work);
  const int64_t n = iterations();
  int64_t total = 0;
  for (const FuzzTarget& t : targets) {
    SCOPED_TRACE(t.name);
    std::printf("fuzz: %s\n", t.name.c_str());
    std::fflush(stdout);
    for (const std::string& seed : t.seeds) ASSERT_NO_THROW(t.run(seed)) << "a seed does not load";
    std::vector<std::string> inputs = t.seeds;
    const fs::path corpus = fs::path(HYTRA_SOURCE_DIR) / "tests/fuzz/corpus" / t.name;
    if (fs::exists(corpus))
      for (const auto& e : fs::directory_iterator(corpus)) inputs.push_back(read(e.path()));
    Mutator m(std::hash<std::string>{}(t.name));
    std::string what;
    for (int64_t i = 0; i < n + int64_t(inputs.size()); ++i) {
      const std::string input =
          i < int64_t(inputs.size()) ? inputs[size_t(i)] : m.mutate(inputs[m.next() % inputs.size()], inputs);
      if (std::getenv("HYTRA_FUZZ_SAVE_EACH") != nullptr) std::ofstream(work + "/current", std::ios::binary) << input;
      if (!survives(t, input, what)) {
        const std::string path = work + "/finding-" + t.name + "-" + std::to_string(i);
        std::ofstream(path, std::ios::binary) << input;
        FAIL() << "input " << i << " (" << path << ") ends in: " << what;
      }
      ++total;
    }
  }
  std::printf("fuzz: %lld inputs over %zu readers\n", static_cast<long long>(total), targets.size());
}

}  // namespace
}  // namespace hytra::test
