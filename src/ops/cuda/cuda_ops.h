// The CUDA implementations of the ops: hytra::cuda::<op> for every row of ops/ops.def,
// defined in ops/cuda/<family>.cu. Arguments were checked by ops:: dispatch.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/ops.h"

namespace hytra::cuda {
#define HYTRA_OP(name, family, params) void name params;
#include "ops/ops.def"
}  // namespace hytra::cuda
