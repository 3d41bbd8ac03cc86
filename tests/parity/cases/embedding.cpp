// Parity cases for embedding_fwd / embedding_bwd: fp32 and bf16 tables, more channels than one
// thread block covers, and many repeated ids (the backward's ordered accumulation).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

// Ids in [0, V), or with `shard` some -1 (another rank's vocabulary shard: zero rows, no gradient).
Tensor ids_for(int64_t N, int64_t V, uint64_t seed, bool shard) {
  Tensor ids = rand_ids({N}, shard ? V + 1 : V, seed);
  if (shard)
    for (int64_t n = 0; n < N; ++n) ids.data<int32_t>()[n] -= 1;
  return ids;
}

void add_fwd(int64_t N, int64_t V, int64_t C, DType dt, bool shard = false) {
  register_case(make_case("embedding_fwd",
                          "N=" + dims({N}) + " V=" + dims({V}) + " C=" + dims({C}) + (shard ? " ids -1" : ""), dt,
                          [=](uint64_t seed) {
                            Tensor ids = ids_for(N, V, seed, shard), table = rand({V, C}, dt, seed + 1);
                            Tensor yg = dev_empty({N, C}, dt), yc = cpu_empty({N, C});
                            ops::embedding_fwd(gpu(), yg, dev(ids), dev(table));
                            ops::embedding_fwd(cpu(), yc, ids, ref(table));
                            return std::vector<Output>{{"y", yg, yc}};
                          }));
}

void add_bwd(int64_t N, int64_t V, int64_t C, DType table_t, DType dy_t, bool shard = false) {
  std::string shape =
      "N=" + dims({N}) + " V=" + dims({V}) + " C=" + dims({C}) + " dy=" + dtype_name(dy_t) + (shard ? " ids -1" : "");
  register_case(make_case("embedding_bwd", shape, table_t, [=](uint64_t seed) {
    Tensor ids = ids_for(N, V, seed, shard), dy = rand({N, C}, dy_t, seed + 1),
           dtable = rand({V, C}, table_t, seed + 2);
    Tensor dg = dev(dtable), dc = ref(dtable);
    ops::embedding_bwd(gpu(), dg, dev(dy), dev(ids));
    ops::embedding_bwd(cpu(), dc, ref(dy), ids);
    return std::vector<Output>{{"dtable", dg, dc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(embedding) {
  add_fwd(300, 50, 96, DType::F32);
  add_fwd(257, 1000, 300, DType::BF16);
  add_bwd(300, 50, 96, DType::F32, DType::F32);
  add_bwd(1000, 37, 300, DType::F32, DType::F32);
  add_bwd(513, 1000, 64, DType::F32, DType::BF16);
  add_bwd(700, 20, 130, DType::BF16, DType::BF16);
  add_bwd(4000, 30, 512, DType::F32, DType::BF16);  // long runs of one id, vector path
  add_bwd(2049, 5000, 1024, DType::F32, DType::F32);
  add_fwd(300, 50, 96, DType::F32, true);  // a vocabulary shard's lookups (tensor parallelism)
  add_fwd(257, 100, 30, DType::BF16, true);
  add_bwd(700, 20, 130, DType::F32, DType::F32, true);
}

}  // namespace hytra::parity
