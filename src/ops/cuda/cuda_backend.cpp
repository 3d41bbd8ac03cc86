// The CUDA backend: every Backend entry points at hytra::cuda::<op> (one line per op, generated
// from ops/ops.def).
#include "ops/backend.h"
#include "ops/cuda/cuda_ops.h"

namespace hytra {

Backend& cuda_backend() {
  static Backend b = [] {
    Backend r;
    r.name = "cuda";
#define HYTRA_OP(op, family, params) r.op = &cuda::op;
#include "ops/ops.def"
    return r;
  }();
  return b;
}

}  // namespace hytra
