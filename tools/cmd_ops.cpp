// `hytra ops`: the op x backend table (docs/ARCHITECTURE.md "The op interface").
#include <cstdio>

#include "commands.h"
#include "core/device.h"
#include "ops/op_list.h"

namespace hytra {

int cmd_ops(int, char**) {
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
