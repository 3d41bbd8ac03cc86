// Parity cases for the mHC mapping projection and the streams' gradient before the sub-layer (mhc_proj_fwd /
// mhc_streams_bwd): n = 1, 2, 4, 8, 16 (P = 3 .. 288 outputs, the fp32 kernels' three register layouts, and the bf16
// tensor-core paths), streams in fp32 and bf16, token counts and row lengths that are not multiples of the kernels'
// tiles (64 and 128 tokens, 32-column chunks, 256 and 64-column blocks) nor of the parts D and the tokens are split
// into. dX and dw start random (they accumulate); a few tokens have rms 0 (the r path's term is then 0).
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
    Tensor mg = dev_empty({N}, DType::F32), mc = cpu_empty({N});
    ops::mhc_proj_fwd(gpu(), pg, mg, dev(x), dev(w));
    ops::mhc_proj_fwd(cpu(), pc, mc, ref(x), ref(w));
    return std::vector<Output>{{"proj", pg, pc}, {"rms", mg, mc}};
  }));
  register_case(make_case("mhc_streams_bwd", shape, dt, [=](uint64_t seed) {
    Tensor X = rand({N, n, C}, dt, seed), w = rand({P, D}, DType::F32, seed + 1, -0.1, 0.1);
    Tensor dproj = rand({N, P}, DType::F32, seed + 2), dX = rand({N, n, C}, dt, seed + 3);
    Tensor dw = rand({P, D}, DType::F32, seed + 4), du = rand({N, C}, dt, seed + 5);
    Tensor h_pre = rand({N, n}, DType::F32, seed + 6, 0.0, 1.0), dr = rand({N}, DType::F32, seed + 7);
    Tensor r = rand({N}, DType::F32, seed + 8, 0.5, 2.0), rms = rand({N}, DType::F32, seed + 9, 0.5, 2.0);
    for (int64_t t = 0; t < N; t += 17) rms.data<float>()[t] = 0.0f;
    Tensor dXg = dev(dX), dwg = dev(dw), dXc = ref(dX), dwc = ref(dw);
    ops::mhc_streams_bwd(gpu(), dXg, dwg, dev(dproj), dev(dr), dev(r), dev(rms), dev(du), dev(h_pre), dev(X), dev(w));
    ops::mhc_streams_bwd(cpu(), dXc, dwc, ref(dproj), ref(dr), ref(r), ref(rms), ref(du), ref(h_pre), ref(X), ref(w));
    return std::vector<Output>{{"dX", dXg, dXc}, {"dw", dwg, dwc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(mhc_proj) {
  add_proj(300, 1, 72, DType::F32);
  add_proj(300, 2, 100, DType::BF16);
  add_proj(1000, 4, 200, DType::BF16);  // 1000 tokens: 16 tiles of 64, the last cut; parts of 63
  add_proj(1000, 4, 200, DType::F32);
  add_proj(129, 8, 96, DType::BF16);
  // bf16 streams on the tensor cores (D a multiple of 32 forward, C of 32 backward): P 3, 8, 24 (and 80 above); (40, 2,
  // 16) has D of one 32-column step, so most of the forward's D parts are empty, and its backward C = 16 takes the
  // plain kernels; (77, 4, 2048) llama3.2-1b's width.
  add_proj(50, 1, 64, DType::BF16);
  add_proj(40, 2, 16, DType::BF16);
  add_proj(77, 4, 2048, DType::BF16);
  add_proj(60, 1, 36, DType::BF16);  // D = 36: bf16 on the plain kernels
  add_proj(70, 16, 40, DType::F32);
}

}  // namespace hytra::parity
