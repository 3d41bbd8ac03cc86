// Parity cases for SwiGLU, GeLU and squared ReLU, forward and backward, fp32 and bf16.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_swiglu(bool fwd, int64_t N, int64_t F, DType dt) {
  register_case(make_case(fwd ? "swiglu_fwd" : "swiglu_bwd", "N=" + dims({N}) + " F=" + dims({F}), dt,
                          [=](uint64_t seed) {
                            Tensor x = rand({N, 2 * F}, dt, seed, -4.0, 4.0);
                            if (fwd) {
                              Tensor yg = dev_empty({N, F}, dt), yc = cpu_empty({N, F});
                              ops::swiglu_fwd(gpu(), yg, dev(x));
                              ops::swiglu_fwd(cpu(), yc, ref(x));
                              return std::vector<Output>{{"y", yg, yc}};
                            }
                            Tensor dy = rand({N, F}, dt, seed + 1);
                            Tensor dxg = dev_empty({N, 2 * F}, dt), dxc = cpu_empty({N, 2 * F});
                            ops::swiglu_bwd(gpu(), dxg, dev(dy), dev(x));
                            ops::swiglu_bwd(cpu(), dxc, ref(dy), ref(x));
                            return std::vector<Output>{{"dx", dxg, dxc}};
                          }));
}

// kind: "gelu" or "sqrelu".
void add_pointwise(const std::string& kind, bool fwd, int64_t N, int64_t C, DType dt) {
  const bool gelu = kind == "gelu";
  register_case(make_case(kind + (fwd ? "_fwd" : "_bwd"), dims({N, C}), dt, [=](uint64_t seed) {
    Tensor x = rand({N, C}, dt, seed, -4.0, 4.0);
    Tensor g = dev_empty({N, C}, dt), c = cpu_empty({N, C});
    if (fwd) {
      if (gelu) {
        ops::gelu_fwd(gpu(), g, dev(x));
        ops::gelu_fwd(cpu(), c, ref(x));
      } else {
        ops::sqrelu_fwd(gpu(), g, dev(x));
        ops::sqrelu_fwd(cpu(), c, ref(x));
      }
      return std::vector<Output>{{"y", g, c}};
    }
    Tensor dy = rand({N, C}, dt, seed + 1);
    if (gelu) {
      ops::gelu_bwd(gpu(), g, dev(dy), dev(x));
      ops::gelu_bwd(cpu(), c, ref(dy), ref(x));
    } else {
      ops::sqrelu_bwd(gpu(), g, dev(dy), dev(x));
      ops::sqrelu_bwd(cpu(), c, ref(dy), ref(x));
    }
    return std::vector<Output>{{"dx", g, c}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(activation) {
  for (bool fwd : {true, false}) {
    add_swiglu(fwd, 37, 300, DType::F32);
    add_swiglu(fwd, 64, 1024, DType::BF16);
    add_swiglu(fwd, 37, 296, DType::F32);   // vector path, fp32
    add_swiglu(fwd, 33, 100, DType::BF16);  // scalar path, bf16
    for (const char* kind : {"gelu", "sqrelu"}) {
      add_pointwise(kind, fwd, 37, 301, DType::F32);   // scalar path, fp32
      add_pointwise(kind, fwd, 64, 1024, DType::BF16);  // vector path, bf16
      add_pointwise(kind, fwd, 37, 296, DType::F32);   // vector path, fp32
      add_pointwise(kind, fwd, 33, 101, DType::BF16);  // scalar path, bf16
    }
  }
}

}  // namespace hytra::parity
