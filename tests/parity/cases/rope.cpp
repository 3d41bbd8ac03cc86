// Parity cases for rope_fwd / rope_bwd: rotate-half and interleaved, full and partial rotary
// dims, fp32 and bf16, and the in-place form (output aliasing the input); rope_yarn with DeepSeek-V3's YaRN
// values (factor 40, ramp over pairs 10..23 of 32, scale from mscale), forward and inverse, from a later position.
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

void add_rope_yarn(int64_t B, int64_t T, int64_t H, int64_t D, int64_t R, bool interleaved, bool inverse, int64_t first,
                   DType dt) {
  std::string shape = dims({B, T, H, D}) + " R=" + dims({R}) + (interleaved ? " il" : "") +
                      (inverse ? " inverse" : "") + " from " + std::to_string(first);
  register_case(make_case("rope_yarn", shape, dt, [=](uint64_t seed) {
    Tensor x = rand({B, T, H, D}, dt, seed);
    Tensor xg = dev(x), xc = ref(x);
    Tensor yg = dev_empty(x.shape(), dt), yc = cpu_empty(x.shape());
    ops::rope_yarn(gpu(), yg, xg, R, 10000.0, 40.0, 10.0, 23.0, 1.2, interleaved, first, inverse);
    ops::rope_yarn(cpu(), yc, xc, R, 10000.0, 40.0, 10.0, 23.0, 1.2, interleaved, first, inverse);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(rope) {
  add_rope_yarn(2, 33, 4, 64, 64, true, false, 0, DType::F32);
  add_rope_yarn(2, 33, 4, 64, 64, true, true, 0, DType::F32);
  add_rope_yarn(1, 40, 3, 96, 64, false, false, 0, DType::BF16);     // with pass-through channels
  add_rope_yarn(2, 1, 16, 192, 64, true, false, 4000, DType::BF16);  // one decoding step at position 4000

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
