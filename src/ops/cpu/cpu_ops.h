// The CPU reference implementations of the ops: hytra::cpu::<op> for every row of ops/ops.def,
// defined in ops/cpu/<family>.cpp. Arguments were checked by ops:: dispatch.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/ops.h"

namespace hytra::cpu {
#define HYTRA_OP(name, family, params) void name params;
#include "ops/ops.def"
}  // namespace hytra::cpu
