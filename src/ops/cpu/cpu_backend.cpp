// The CPU reference backend: every Backend entry points at hytra::cpu::<op> (one line per op, generated
// from ops/ops.def).
#include "ops/backend.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra {

Backend& cpu_backend() {
  static Backend b = [] {
    Backend r;
    r.name = "cpu";
#define HYTRA_OP(op, family, params) r.op = &cpu::op;
#include "ops/ops.def"
    return r;
  }();
  return b;
}

}  // namespace hytra
