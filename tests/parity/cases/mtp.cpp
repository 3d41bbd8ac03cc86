// Parity cases for mtp_shift: data movement, an integer count and one division per element, so the
// results must match exactly; labels hold ignored (-1) positions, and one case has no target at all.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

void add_mtp_shift(int64_t B, int64_t T, int ignored_percent) {
  const Shape s{B, T};
  Case c = make_case("mtp_shift", dims({B, T}) + " ignored " + std::to_string(ignored_percent) + "%", DType::F32,
                     [=](uint64_t seed) {
                       Tensor ids = rand_ids(s, 50000, seed), labels = rand_ids(s, 50000, seed + 1);
                       const Tensor coin = rand_ids(s, 100, seed + 2);
                       for (int64_t i = 0; i < labels.numel(); ++i)
                         if (coin.data<int32_t>()[i] < ignored_percent) labels.data<int32_t>()[i] = -1;
                       Tensor ig = dev_empty(s, DType::I32), lg = dev_empty(s, DType::I32);
                       Tensor dg = dev_empty(s, DType::F32), ng = dev_empty({1}, DType::F32);
                       Tensor ic = Tensor::empty(s, DType::I32), lc = Tensor::empty(s, DType::I32);
                       Tensor dc = cpu_empty(s), nc = cpu_empty({1});
                       ops::mtp_shift(gpu(), ig, lg, dg, ng, dev(ids), dev(labels), 0.3 / 2.0, 0.25);
                       ops::mtp_shift(cpu(), ic, lc, dc, nc, ids, labels, 0.3 / 2.0, 0.25);
                       return std::vector<Output>{{"ids_next", ig, ic}, {"labels_next", lg, lc}, {"dloss", dg, dc},
                                                  {"targets", ng, nc}};
                     });
  c.criterion = Criterion::Exact;
  c.tol = 0;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(mtp) {
  add_mtp_shift(2, 4096, 10);
  add_mtp_shift(3, 17, 50);
  add_mtp_shift(1, 1, 0);      // the only position is the rolled-in tail: no target
  add_mtp_shift(4, 300, 100);  // every label ignored
}

}  // namespace hytra::parity
