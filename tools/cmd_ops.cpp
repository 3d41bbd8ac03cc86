// `hytra ops`: the op x backend table (docs/ARCHITECTURE.md "The op interface").
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "core/device.h"
#include "ops/op_list.h"

namespace hytra {

int cmd_ops(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    std::fprintf(help ? stdout : stderr, "usage: hytra ops   (no arguments: prints the op x backend table)\n");
    return help ? 0 : 2;
  }
#ifdef HYTRA_HAVE_CUDA
  const char* cuda = cuda_available() ? "yes" : "yes (no GPU visible)";
#else
  const char* cuda = "not built";
#endif
  std::printf("%-18s %-14s %-4s %s\n", "op", "family", "cpu", "cuda");
  for (const auto& op : ops::kOpList) std::printf("%-18s %-14s %-4s %s\n", op.name, op.family, "yes", cuda);
  return 0;
}

}  // namespace hytra
