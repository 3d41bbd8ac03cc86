// Parity cases for rope_fwd / rope_bwd: rotate-half and interleaved, full and partial rotary
// dims, fp32 and bf16, and the in-place form (output aliasing the input).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_rope(bool fwd, int64_t B, int64_t T, int64_t H, int64_t D, int64_t R, bool interleaved, bool in_place,
              DType dt) {
  std::string shape = dims({B, T, H, D}) + " R=" + dims({R}) + (interleaved ? " il" : "") + (in_place ? " inplace" : "");
  register_case(make_case(fwd ? "rope_fwd" : "rope_bwd", shape, dt, [=](uint64_t seed) {
    const double base = 10000.0;
    Tensor x = rand({B, T, H, D}, dt, seed);
    Tensor xg = dev(x), xc = ref(x);
    Tensor yg = in_place ? xg : dev_empty(x.shape(), dt), yc = cpu_empty(x.shape());
    if (fwd) {
      ops::rope_fwd(gpu(), yg, xg, R, base, interleaved);
      ops::rope_fwd(cpu(), yc, xc, R, base, interleaved);
    } else {
      ops::rope_bwd(gpu(), yg, xg, R, base, interleaved);
      ops::rope_bwd(cpu(), yc, xc, R, base, interleaved);
    }
    return std::vector<Output>{{fwd ? "y" : "dx", yg, yc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(rope) {
  for (bool fwd : {true, false}) {
    add_rope(fwd, 2, 17, 3, 64, 64, false, false, DType::F32);
    add_rope(fwd, 2, 33, 4, 64, 32, true, false, DType::F32);
    add_rope(fwd, 1, 50, 2, 96, 48, false, false, DType::F32);
    add_rope(fwd, 2, 128, 8, 128, 128, false, false, DType::BF16);
    add_rope(fwd, 1, 40, 4, 64, 64, true, true, DType::BF16);
    add_rope(fwd, 2, 64, 4, 128, 64, false, false, DType::BF16);  // vector path with pass-through
    add_rope(fwd, 1, 64, 8, 64, 48, true, false, DType::BF16);   // interleaved, R % 8 == 0 with pass-through
    add_rope(fwd, 1, 30, 3, 64, 64, false, true, DType::F32);     // vector path, fp32, in place
    add_rope(fwd, 1, 20, 2, 40, 20, false, false, DType::BF16);   // scalar path (R/2 % 8 != 0)
  }
}

}  // namespace hytra::parity
