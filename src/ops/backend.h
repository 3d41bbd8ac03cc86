// Backend: one function pointer per row of ops/ops.def, filled by each backend's registration
// (cpu/cpu_backend.cpp, cuda/cuda_backend.cpp) with its hytra::cpu::<op> / hytra::cuda::<op>. A
// backend that lacks an op fails to link. ops::X checks arguments, then calls ex.backend().X.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/op_types.h"

namespace hytra {

struct Backend {
  const char* name = "";
#define HYTRA_OP(op, family, params) void(*op) params = nullptr;
#include "ops/ops.def"
};

// The backends; cuda_backend() throws a clear error in builds without CUDA.
Backend& cpu_backend();
Backend& cuda_backend();

}  // namespace hytra
