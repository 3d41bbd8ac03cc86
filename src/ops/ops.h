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

// moe_plan_capacity's R_max: the most rows its plan can use for N tokens, top-k K, E experts and these options.
// With cap = min(capacity, N) (N without a capacity) and m = pad_multiple (1 without): E * min(cap rounded up
// to m, N) with pad_to_capacity (every expert exactly that: the bound is exact), else
// min(min(N*K, E*cap) + E*(m-1), E*N) (at most cap kept an expert, the rounding adds fewer than m each).
int64_t moe_capacity_rows(int64_t N, int64_t K, int64_t E, int64_t capacity, bool pad_to_capacity,
                          int64_t pad_multiple);
}  // namespace hytra::ops
