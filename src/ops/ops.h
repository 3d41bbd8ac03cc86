// The ops:: entry points, one per row of ops/ops.def (which documents each op: read it there).
// ops::X checks devices, dtypes and shapes (ops.cpp), then calls ex.backend().X.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/op_types.h"

namespace hytra::ops {
#define HYTRA_OP(name, family, params) void name params;
#include "ops/ops.def"
}  // namespace hytra::ops
