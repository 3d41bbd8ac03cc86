// Parity cases for the mHC mapping projection (mhc_proj_fwd / mhc_proj_bwd): n = 1, 2, 4, 8, 16 (P = 3 .. 288
// outputs, the fp32 kernels' three register layouts, and the bf16 tensor-core paths), streams in fp32 and bf16,
// token counts and row lengths that are
// not multiples of the kernels' tiles (64 tokens, 32-column chunks, 256 and 64-column blocks) nor of the 16
// parts D and the tokens are split into. dx and dw start random (they accumulate).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_proj(int64_t N, int64_t n, int64_t C, DType dt) {
  const int64_t P = n * n + 2 * n, D = n * C;
  const std::string shape = "N=" + dims({N}) + " n=" + dims({n}) + " C=" + dims({C});
  register_case(make_case("mhc_proj_fwd", shape, dt, [=](uint64_t seed) {
    Tensor x = rand({N, D}, dt, seed), w = rand({P, D}, DType::F32, seed + 1, -0.1, 0.1);
    Tensor pg = dev_empty({N, P}, DType::F32), pc = cpu_empty({N, P});
    ops::mhc_proj_fwd(gpu(), pg, dev(x), dev(w));
    ops::mhc_proj_fwd(cpu(), pc, ref(x), ref(w));
    return std::vector<Output>{{"proj", pg, pc}};
  }));
  register_case(make_case("mhc_proj_bwd", shape, dt, [=](uint64_t seed) {
    Tensor x = rand({N, D}, dt, seed), w = rand({P, D}, DType::F32, seed + 1, -0.1, 0.1);
    Tensor dproj = rand({N, P}, DType::F32, seed + 2), dx = rand({N, D}, dt, seed + 3);
    Tensor dw = rand({P, D}, DType::F32, seed + 4);
    Tensor dxg = dev(dx), dwg = dev(dw), dxc = ref(dx), dwc = ref(dw);
    ops::mhc_proj_bwd(gpu(), dxg, dwg, dev(dproj), dev(x), dev(w));
    ops::mhc_proj_bwd(cpu(), dxc, dwc, ref(dproj), ref(x), ref(w));
    return std::vector<Output>{{"dx", dxg, dxc}, {"dw", dwg, dwc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(mhc_proj) {
  add_proj(300, 1, 72, DType::F32);
  add_proj(300, 2, 100, DType::BF16);
  add_proj(1000, 4, 200, DType::BF16);  // 1000 tokens: 16 tiles of 64, the last cut; parts of 63
  add_proj(1000, 4, 200, DType::F32);
  add_proj(129, 8, 96, DType::BF16);
  // bf16 streams on the tensor cores (D a multiple of 32 forward, of 8 backward): P 3, 8, 24; (40, 2, 16) has D of
  // one 32-column step, so most of the forward's D parts are empty; (77, 4, 2048) llama3.2-1b's width.
  add_proj(50, 1, 64, DType::BF16);
  add_proj(40, 2, 16, DType::BF16);
  add_proj(77, 4, 2048, DType::BF16);
  add_proj(60, 1, 36, DType::BF16);  // D = 36: bf16 on the plain kernels
  add_proj(70, 16, 40, DType::F32);
}

}  // namespace hytra::parity
