// Parity cases for qkv_rope_fwd / qkv_rope_bwd: MHA, GQA and MQA groupings, full and partial rotary
// dims, rotate-half and interleaved, fp32 and bf16.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_qkv_rope(bool fwd, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t R, bool interleaved,
                  DType dt) {
  const std::string shape = "B=" + dims({B}) + " T=" + dims({T}) + " H=" + dims({H}) + "/" + dims({Hkv}) +
                            " D=" + dims({D}) + " R=" + dims({R}) + (interleaved ? " il" : "");
  register_case(make_case(fwd ? "qkv_rope_fwd" : "qkv_rope_bwd", shape, dt, [=](uint64_t seed) {
    const double base = 10000.0;
    const Shape qs{B, T, H, D}, ks{B, T, Hkv, D}, gs{B, T, (H + 2 * Hkv) * D};
    if (fwd) {
      Tensor qkv = rand(gs, dt, seed);
      Tensor qg = dev_empty(qs, dt), kg = dev_empty(ks, dt), vg = dev_empty(ks, dt);
      Tensor qc = cpu_empty(qs), kc = cpu_empty(ks), vc = cpu_empty(ks);
      ops::qkv_rope_fwd(gpu(), qg, kg, vg, dev(qkv), R, base, interleaved);
      ops::qkv_rope_fwd(cpu(), qc, kc, vc, ref(qkv), R, base, interleaved);
      return std::vector<Output>{{"q", qg, qc}, {"k", kg, kc}, {"v", vg, vc}};
    }
    Tensor dq = rand(qs, dt, seed), dk = rand(ks, dt, seed + 1), dv = rand(ks, dt, seed + 2);
    Tensor dg = dev_empty(gs, dt), dc = cpu_empty(gs);
    ops::qkv_rope_bwd(gpu(), dg, dev(dq), dev(dk), dev(dv), R, base, interleaved);
    ops::qkv_rope_bwd(cpu(), dc, ref(dq), ref(dk), ref(dv), R, base, interleaved);
    return std::vector<Output>{{"dqkv", dg, dc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(qkv_rope) {
  for (bool fwd : {true, false}) {
    add_qkv_rope(fwd, 2, 17, 4, 4, 64, 64, false, DType::F32);
    add_qkv_rope(fwd, 1, 33, 6, 2, 32, 16, true, DType::F32);
    add_qkv_rope(fwd, 2, 20, 4, 1, 48, 32, false, DType::F32);
    add_qkv_rope(fwd, 2, 256, 32, 8, 64, 64, false, DType::BF16);
    add_qkv_rope(fwd, 1, 40, 8, 2, 128, 64, true, DType::BF16);
  }
}

}  // namespace hytra::parity
