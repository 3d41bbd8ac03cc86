// libFuzzer entry point over the same targets as the gcc fuzz test (tests/fuzz/fuzz_targets.h), for clang users:
//   cmake -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DHYTRA_LIBFUZZER=ON && cmake --build build-fuzz --target
//   hytra_libfuzzer && HYTRA_FUZZ_TARGET=safetensors build-fuzz/tests/hytra_libfuzzer -max_total_time=60
// HYTRA_FUZZ_TARGET names the reader (the target names of fuzz_targets.h); the seeds are libFuzzer's starting
// corpus when it is given an empty corpus folder.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_targets.h"

namespace {
const hytra::test::FuzzTarget& target() {
  static const std::vector<hytra::test::FuzzTarget> all = hytra::test::fuzz_targets("/tmp/hytra_libfuzzer");
  const char* name = std::getenv("HYTRA_FUZZ_TARGET");
  for (const auto& t : all)
    if (name != nullptr && t.name == name) return t;
  std::fprintf(stderr, "HYTRA_FUZZ_TARGET: expected one of");
  for (const auto& t : all) std::fprintf(stderr, " %s", t.name.c_str());
  std::fprintf(stderr, "\n");
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    target().run(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const hytra::Error&) {
  }
  return 0;
}
