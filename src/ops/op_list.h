// The op names and families of ops/ops.def, in its order: drives the parity harness's coverage
// check and `hytra ops`.
#pragma once

namespace hytra::ops {
struct OpInfo {
  const char* name;
  const char* family;
};
inline constexpr OpInfo kOpList[] = {
#define HYTRA_OP(name, family, params) OpInfo{#name, #family},
#include "ops/ops.def"
};
inline constexpr int kNumOps = int(sizeof(kOpList) / sizeof(kOpList[0]));
}  // namespace hytra::ops
