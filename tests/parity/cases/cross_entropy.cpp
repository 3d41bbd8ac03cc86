// Parity cases for lm_head_ce_fwd / lm_head_ce_bwd: several vocabulary chunks with a ragged last
// one, a single chunk, ignored labels (-1), fp32 and bf16. Each device's backward takes the lse of its
// own forward (the pairing training uses). bf16 backward tolerance is 1e-2: the GPU keeps bf16 logits
// (the GEMM's output, as Megatron) and bf16 dlogits. A logit's rounding error grows with its size, so
// x is drawn in +-0.5 (logits of std ~2-3 here, the scale of a language model's). lm_head_ce_fwd_bwd:
// the `chunk` of a spec is its token chunk there (ragged last chunk, one chunk, chunk > N). The backward also runs
// with labels of another vocabulary shard (V: no one-hot term, tensor parallelism).
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct CeSpec {
  int64_t N, C, V, chunk;
  DType dt;
  bool shard = false;  // backward: every 5th label is V (another shard's)
};

std::string shape_of(const CeSpec& s) {
  return "N=" + dims({s.N}) + " C=" + dims({s.C}) + " V=" + dims({s.V}) + " chunk=" + dims({s.chunk}) +
         (s.shard ? " shard labels" : "");
}

// Labels in [0, V), every 7th row ignored (-1).
Tensor labels_for(const CeSpec& s, uint64_t seed) {
  std::vector<double> v = rand_ids({s.N}, s.V, seed).to_f64_vector();
  for (size_t i = 0; i < v.size(); i += 7) v[i] = -1;
  Tensor t = Tensor::empty({s.N}, DType::I32);
  t.copy_from_f64(v);
  return t;
}

void add_fwd(CeSpec s) {
  register_case(make_case("lm_head_ce_fwd", shape_of(s), s.dt, [s](uint64_t seed) {
    Tensor x = rand({s.N, s.C}, s.dt, seed, -0.5, 0.5), w = rand({s.V, s.C}, s.dt, seed + 1);
    Tensor labels = labels_for(s, seed + 2);
    Tensor lossg = dev_empty({s.N}, DType::F32), lseg = dev_empty({s.N}, DType::F32);
    Tensor lossc = cpu_empty({s.N}), lsec = cpu_empty({s.N});
    ops::lm_head_ce_fwd(gpu(), lossg, lseg, dev(x), dev(w), dev(labels), s.chunk);
    ops::lm_head_ce_fwd(cpu(), lossc, lsec, ref(x), ref(w), labels, s.chunk);
    return std::vector<Output>{{"loss", lossg, lossc}, {"lse", lseg, lsec}};
  }));
}

void add_bwd(CeSpec s) {
  Case c = make_case("lm_head_ce_bwd", shape_of(s), s.dt, [s](uint64_t seed) {
    Tensor x = rand({s.N, s.C}, s.dt, seed, -0.5, 0.5), w = rand({s.V, s.C}, s.dt, seed + 1);
    Tensor labels = labels_for(s, seed + 2), fwd_labels = labels_for(s, seed + 2);  // lse does not read labels
    if (s.shard)
      for (int64_t n = 3; n < s.N; n += 5) {
        labels.data<int32_t>()[n] = int32_t(s.V);
        fwd_labels.data<int32_t>()[n] = -1;
      }
    Tensor dloss = rand({s.N}, DType::F32, seed + 3, 0.0, 1.0), dw = rand({s.V, s.C}, DType::F32, seed + 4);
    Tensor loss = cpu_empty({s.N}), lse = cpu_empty({s.N});
    ops::lm_head_ce_fwd(cpu(), loss, lse, ref(x), ref(w), fwd_labels, s.chunk);
    Tensor lossg = dev_empty({s.N}, DType::F32), lseg = dev_empty({s.N}, DType::F32);
    ops::lm_head_ce_fwd(gpu(), lossg, lseg, dev(x), dev(w), dev(fwd_labels), s.chunk);
    Tensor dxg = dev_empty({s.N, s.C}, s.dt), dwg = dev(dw);
    Tensor dxc = cpu_empty({s.N, s.C}), dwc = ref(dw);
    ops::lm_head_ce_bwd(gpu(), dxg, dwg, dev(dloss), dev(x), dev(w), dev(labels), lseg, s.chunk);
    ops::lm_head_ce_bwd(cpu(), dxc, dwc, dloss, ref(x), ref(w), labels, lse, s.chunk);
    return std::vector<Output>{{"dx", dxg, dxc}, {"dw", dwg, dwc}};
  });
  if (s.dt == DType::BF16) c.tol = 1e-2;
  register_case(c);
}

void add_fwd_bwd(CeSpec s) {
  Case c = make_case("lm_head_ce_fwd_bwd", shape_of(s), s.dt, [s](uint64_t seed) {
    Tensor x = rand({s.N, s.C}, s.dt, seed, -0.5, 0.5), w = rand({s.V, s.C}, s.dt, seed + 1);
    Tensor labels = labels_for(s, seed + 2);
    Tensor dloss = rand({s.N}, DType::F32, seed + 3, 0.0, 1.0), dw = rand({s.V, s.C}, DType::F32, seed + 4);
    Tensor lossg = dev_empty({s.N}, DType::F32), dxg = dev_empty({s.N, s.C}, s.dt), dwg = dev(dw);
    Tensor lossc = cpu_empty({s.N}), dxc = cpu_empty({s.N, s.C}), dwc = ref(dw);
    ops::lm_head_ce_fwd_bwd(gpu(), lossg, dxg, dwg, dev(x), dev(w), dev(labels), dev(dloss), s.chunk);
    ops::lm_head_ce_fwd_bwd(cpu(), lossc, dxc, dwc, ref(x), ref(w), labels, dloss, s.chunk);
    return std::vector<Output>{{"loss", lossg, lossc}, {"dx", dxg, dxc}, {"dw", dwg, dwc}};
  });
  if (s.dt == DType::BF16) c.tol = 1e-2;
  register_case(c);
}

}  // namespace

HYTRA_PARITY_CASES(cross_entropy) {
  const CeSpec specs[] = {
      {64, 96, 1000, 256, DType::F32},
      {50, 128, 3000, 4096, DType::F32},
      {64, 128, 5000, 1024, DType::BF16},
      {33, 256, 2048, 2048, DType::BF16},
      {40, 64, 1001, 256, DType::BF16},  // a ragged chunk of 233: the one-element kernel paths
  };
  for (const CeSpec& s : specs) {
    add_fwd(s);
    add_bwd(s);
  }
  add_bwd({64, 96, 1000, 256, DType::F32, true});
  add_bwd({40, 64, 1001, 256, DType::BF16, true});
  const CeSpec fused[] = {
      {64, 96, 1000, 24, DType::F32},
      {50, 128, 3000, 64, DType::F32},
      {64, 128, 5000, 20, DType::BF16},
      {33, 256, 2048, 33, DType::BF16},
      {40, 64, 1001, 16, DType::F32},  // V 1001: the one-element kernel paths
      {40, 64, 1001, 16, DType::BF16},
  };
  for (const CeSpec& s : fused) add_fwd_bwd(s);
}

}  // namespace hytra::parity
