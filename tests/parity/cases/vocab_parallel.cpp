// Parity cases for the vocabulary-parallel helpers: the id mapping must match exactly; the cross-entropy pieces
// are a subtraction and a log-sum-exp over a few shards per row (fp32, elementwise).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

// Ids in [-1, V): some ignored, the rest spread over the shards.
Tensor ids_with_ignored(int64_t N, int64_t V, uint64_t seed) {
  Tensor ids = rand_ids({N}, V + 1, seed);
  for (int64_t n = 0; n < N; ++n) ids.data<int32_t>()[n] -= 1;
  return ids;
}

void add_ids(int64_t N, int64_t V, int64_t start, int64_t count, int64_t outside) {
  Case c =
      make_case("vocab_shard_ids", "N=" + dims({N}) + " shard " + dims({start, count}), DType::F32, [=](uint64_t seed) {
        Tensor ids = ids_with_ignored(N, V, seed);
        Tensor og = dev_empty({N}, DType::I32), oc = Tensor::empty({N}, DType::I32);
        ops::vocab_shard_ids(gpu(), og, dev(ids), start, count, outside);
        ops::vocab_shard_ids(cpu(), oc, ids, start, count, outside);
        return std::vector<Output>{{"out", og, oc}};
      });
  c.criterion = Criterion::Exact;
  register_case(c);
}

void add_target(int64_t N) {
  register_case(make_case("ce_shard_target", "N=" + dims({N}), DType::F32, [=](uint64_t seed) {
    Tensor labels = ids_with_ignored(N, 3, seed), loss = rand({N}, DType::F32, seed + 1, 0.0, 5.0);
    Tensor lse = rand({N}, DType::F32, seed + 2, 5.0, 12.0);
    Tensor tg = dev_empty({N}, DType::F32), tc = cpu_empty({N});
    ops::ce_shard_target(gpu(), tg, dev(loss), dev(lse), dev(labels));
    ops::ce_shard_target(cpu(), tc, loss, lse, labels);
    return std::vector<Output>{{"target", tg, tc}};
  }));
}

void add_combine(int64_t S, int64_t N) {
  register_case(make_case("ce_shard_combine", "S=" + dims({S}) + " N=" + dims({N}), DType::F32, [=](uint64_t seed) {
    Tensor labels = ids_with_ignored(N, 1000, seed), parts = rand({S, N}, DType::F32, seed + 1, -20.0, 20.0);
    Tensor target = rand({N}, DType::F32, seed + 2, -10.0, 10.0);
    Tensor lg = dev_empty({N}, DType::F32), eg = dev_empty({N}, DType::F32), lc = cpu_empty({N}), ec = cpu_empty({N});
    ops::ce_shard_combine(gpu(), lg, eg, dev(parts), dev(target), dev(labels));
    ops::ce_shard_combine(cpu(), lc, ec, parts, target, labels);
    return std::vector<Output>{{"loss", lg, lc}, {"lse", eg, ec}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(vocab_parallel) {
  add_ids(5000, 50304, 0, 25152, -1);
  add_ids(3000, 50304, 25152, 25152, 25152);
  add_ids(700, 1000, 750, 250, 250);
  add_target(4097);
  add_combine(2, 4096);
  add_combine(8, 1000);
  add_combine(1, 33);
}

}  // namespace hytra::parity
