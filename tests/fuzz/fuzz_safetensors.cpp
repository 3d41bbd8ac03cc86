// libFuzzer target for the safetensors reader: any byte string must either load or fail with a
// hytra::Error, never crash or hang. Build and run (clang):
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -Isrc tests/fuzz/fuzz_safetensors.cpp \
//     src/checkpoint/safetensors.cpp src/core/json.cpp src/core/atomic_file.cpp -o /tmp/fuzz_st &&
//   /tmp/fuzz_st -max_total_time=60
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "checkpoint/safetensors.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/hytra_fuzz_st_" + std::to_string(getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    hytra::SafetensorsFile file(path);
    for (const auto& e : file.entries()) (void)file.data(e)[0 * (e.end - e.begin)];
  } catch (const hytra::Error&) {
  }
  return 0;
}
