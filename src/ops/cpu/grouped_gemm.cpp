// The experts' grouped GEMMs, CPU reference (ops.def grouped_gemm*): one plain GEMM per non-empty group on
// its rows (the CPU reads the offsets directly), the fused GLU as the GEMM followed by moe_act_fwd on the
// groups' rows.
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace hytra::cpu {
namespace {

// Group e's rows [first, end) after checking the offsets ascend from 0 to at most R (rows past offsets[E]
// are in no group: a capacity plan's unused rows).
struct Groups {
  const int32_t* o;
  int64_t E;
  Groups(const Tensor& offsets, int64_t R, const char* op) : o(offsets.data<int32_t>()), E(offsets.numel() - 1) {
    HYTRA_CHECK(o[0] == 0 && o[E] <= R, op, ": offsets must run from 0 to at most R = ", R, ", got ", o[0], " to ",
                o[E]);
    for (int64_t e = 0; e < E; ++e)
      HYTRA_CHECK(o[e] <= o[e + 1], op, ": offsets must be ascending, got ", o[e], " then ", o[e + 1]);
  }
  int64_t first(int64_t e) const { return o[e]; }
  int64_t rows(int64_t e) const { return o[e + 1] - o[e]; }
};

Tensor expert(const Tensor& w, int64_t e) { return w.narrow(0, e, 1).view({w.size(1), w.size(2)}); }

}  // namespace

void grouped_gemm(Exec& ex, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets, bool trans_w) {
  const Groups g(offsets, a.size(0), "grouped_gemm");
  for (int64_t e = 0; e < g.E; ++e) {
    if (g.rows(e) == 0) continue;
    Tensor ye = y.narrow(0, g.first(e), g.rows(e));
    ops::gemm(ex, ye, a.narrow(0, g.first(e), g.rows(e)), expert(w, e), false, trans_w, 1.0f, 0.0f);
  }
}

void grouped_gemm_wgrad(Exec& ex, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets, float beta) {
  const Groups g(offsets, x.size(0), "grouped_gemm_wgrad");
  for (int64_t e = 0; e < g.E; ++e) {
    Tensor dwe = expert(dw, e);
    if (g.rows(e) == 0) {
      if (beta == 0.0f) ops::fill(ex, dwe, 0.0);
      continue;
    }
    ops::gemm(ex, dwe, dy.narrow(0, g.first(e), g.rows(e)), x.narrow(0, g.first(e), g.rows(e)), true, false, 1.0f,
              beta);
  }
}

void grouped_gemm_glu(Exec& ex, Tensor& h, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets,
                      const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset,
                      double clamp) {
  grouped_gemm(ex, h, a, w, offsets, true);
  const int64_t used = offsets.data<int32_t>()[offsets.numel() - 1];  // rows past the groups are left alone
  Tensor yu = y.narrow(0, 0, used);
  ops::moe_act_fwd(ex, yu, h.narrow(0, 0, used), probs.narrow(0, 0, used), act, glu_interleave, linear_offset, clamp);
}

}  // namespace hytra::cpu
