// Parity cases for gemm: every transpose combination, fp32 and bf16 (fp32 or bf16 C), 2-D and
// batched, alpha/beta, small-integer inputs that must match exactly, and a 1024^3 bf16 product.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct GemmSpec {
  int64_t batch;  // 0: 2-D
  int64_t M, N, K;
  bool ta, tb;
  DType ab, c;
  float alpha, beta;
  bool ints;  // small-integer inputs (exact)
};

Shape mat(const GemmSpec& s, int64_t rows, int64_t cols) {
  return s.batch ? Shape{s.batch, rows, cols} : Shape{rows, cols};
}

std::vector<Output> run_gemm(const GemmSpec& s, uint64_t seed) {
  const Shape as = s.ta ? mat(s, s.K, s.M) : mat(s, s.M, s.K);
  const Shape bs = s.tb ? mat(s, s.N, s.K) : mat(s, s.K, s.N);
  const Shape cs = mat(s, s.M, s.N);
  Tensor A = s.ints ? rand_ints(as, s.ab, seed, -4, 4) : rand(as, s.ab, seed);
  Tensor B = s.ints ? rand_ints(bs, s.ab, seed + 1, -4, 4) : rand(bs, s.ab, seed + 1);
  Tensor C0 = s.ints ? rand_ints(cs, s.c, seed + 2, -4, 4) : rand(cs, s.c, seed + 2);
  Tensor Cg = dev(C0), Cc = ref(C0);
  ops::gemm(gpu(), Cg, dev(A), dev(B), s.ta, s.tb, s.alpha, s.beta);
  ops::gemm(cpu(), Cc, ref(A), ref(B), s.ta, s.tb, s.alpha, s.beta);
  return {{"C", Cg, Cc}};
}

void add(const GemmSpec& s) {
  std::string shape = (s.batch ? dims({s.batch}) + "x" : "") + dims({s.M, s.N, s.K}) + (s.ta ? " t" : " n") +
                      (s.tb ? "t" : "n") + (s.c != s.ab ? " C=fp32" : "") +
                      (s.alpha != 1.0f || s.beta != 0.0f ? " ab" : "") + (s.ints ? " ints" : "");
  Case c = make_case("gemm", shape, s.ab, [s](uint64_t seed) { return run_gemm(s, seed); });
  if (s.ints) {
    c.criterion = Criterion::Exact;
    c.tol = 0;
  }
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(gemm) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    add({0, 37, 53, 29, ta, tb, f32, f32, 1.0f, 0.0f, false});
    add({0, 64, 48, 96, ta, tb, f32, f32, 1.5f, 0.5f, false});
    add({0, 64, 48, 96, ta, tb, f32, f32, 1.0f, 0.0f, true});
    add({0, 64, 80, 96, ta, tb, bf16, f32, 1.0f, 0.0f, false});
    add({0, 64, 80, 96, ta, tb, bf16, bf16, 0.5f, 1.0f, false});
    add({0, 64, 80, 96, ta, tb, bf16, f32, 1.0f, 0.0f, true});
  }
  add({0, 64, 48, 96, false, false, f32, f32, 2.0f, 1.0f, true});
  add({3, 32, 40, 24, false, true, f32, f32, 1.0f, 0.0f, false});
  add({3, 32, 40, 24, true, false, f32, f32, 1.0f, 1.0f, true});
  add({4, 64, 32, 48, false, false, bf16, bf16, 1.0f, 0.0f, false});
  add({2, 64, 32, 48, true, true, bf16, f32, 1.0f, 0.0f, true});
  add({0, 1024, 1024, 1024, false, true, bf16, bf16, 1.0f, 0.0f, false});
}

}  // namespace hytra::parity
