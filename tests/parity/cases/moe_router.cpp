// Parity cases for the MoE router ops (fp32 logits, the only CUDA dtype): moe_router_fwd in every
// mode (softmax over the selected, pre-softmax, sigmoid with and without expert bias,
// group-limited, scaling), k = 1, 2, 6, 8 and E = 8, 64, 256 with row counts that are multiples of
// nothing; moe_router_bwd on the CPU forward's selection; moe_aux_loss with 1 and several
// sequences, global counts, ragged row chunks, onto random dlogits; moe_z_loss onto random dlogits.
// Selections must match exactly, so inputs make ties impossible across backends: each row's
// selection values sit on a grid in a random order (for sigmoid + bias the grid is laid out for
// sigmoid(x) + bias, x solved for it), and rows whose group scores come within 1e-4 (relative) of
// each other are redrawn. Integer outputs (top, counts) are their own Exact cases; the
// accumulated dlogits start at values of the gradient's own size, so the gradient is what is
// compared.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

using ops::RouterScore;

struct RouterSpec {
  int64_t N, E, k;
  RouterScore score;
  bool pre_softmax, bias;
  int64_t num_groups, group_topk;
  double scaling;
};

std::string shape_of(const RouterSpec& s) {
  std::string t = "N=" + dims({s.N}) + " E=" + dims({s.E}) + " k=" + dims({s.k});
  t += s.score == RouterScore::Sigmoid ? (s.bias ? " sig+b" : " sig") : (s.pre_softmax ? " pre" : " post");
  if (s.num_groups > 0) t += " g=" + dims({s.num_groups}) + "/" + dims({s.group_topk});
  return t;
}

// (0.5 .. E-0.5) / E in a random order (ranks of uniform draws).
std::vector<double> shuffled_grid(int64_t E, uint64_t seed) {
  const std::vector<double> u = rand({E}, DType::F32, seed, 0.0, 1.0).to_f64_vector();
  std::vector<int64_t> idx(E);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&u](int64_t a, int64_t b) { return u[a] < u[b]; });
  std::vector<double> g(E);
  for (int64_t r = 0; r < E; ++r) g[idx[r]] = (double(r) + 0.5) / double(E);
  return g;
}

// The selection values of one row in fp64 (the op's v before group masking).
std::vector<double> selection_values(const RouterSpec& s, const float* x, const std::vector<double>& bias) {
  std::vector<double> v(s.E);
  if (s.score == RouterScore::Sigmoid) {
    for (int64_t e = 0; e < s.E; ++e) v[e] = 1.0 / (1.0 + std::exp(-double(x[e]))) + bias[e];
  } else if (s.pre_softmax) {
    const double m = *std::max_element(x, x + s.E);
    double z = 0;
    for (int64_t e = 0; e < s.E; ++e) z += (v[e] = std::exp(double(x[e]) - m));
    for (double& ve : v) ve /= z;
  } else {
    for (int64_t e = 0; e < s.E; ++e) v[e] = x[e];
  }
  return v;
}

// All group scores (sum of each group's top k / group_topk values) at least 1e-4 * max apart.
bool groups_separated(const RouterSpec& s, const std::vector<double>& v) {
  const int64_t per = s.E / s.num_groups, m = s.k / s.group_topk;
  std::vector<double> score;
  for (int64_t g = 0; g < s.num_groups; ++g) {
    std::vector<double> grp(v.begin() + g * per, v.begin() + (g + 1) * per);
    std::sort(grp.rbegin(), grp.rend());
    score.push_back(std::accumulate(grp.begin(), grp.begin() + m, 0.0));
  }
  std::sort(score.begin(), score.end());
  const double tol = 1e-4 * std::max(std::fabs(score.front()), std::fabs(score.back()));
  for (size_t i = 1; i < score.size(); ++i)
    if (score[i] - score[i - 1] < tol) return false;
  return true;
}

struct RouterInputs {
  Tensor logits, bias;  // (N,E) fp32; (E) fp32 or undefined
};

// Logits for s: softmax and plain sigmoid: x = -3 + 6 grid; sigmoid + bias: b in [-0.2, 0.2],
// sigmoid(x) = 0.25 + 0.5 grid - b. Rows failing groups_separated are redrawn from a new seed.
RouterInputs router_inputs(const RouterSpec& s, uint64_t seed) {
  std::vector<double> b(s.E, 0.0);
  RouterInputs in;
  if (s.bias) {
    in.bias = rand({s.E}, DType::F32, seed + 1, -0.2, 0.2);
    b = in.bias.to_f64_vector();
  }
  in.logits = Tensor::empty({s.N, s.E}, DType::F32);
  float* x = in.logits.data<float>();
  for (int64_t n = 0; n < s.N; ++n) {
    for (uint64_t attempt = 0;; ++attempt) {
      const std::vector<double> g = shuffled_grid(s.E, seed + 7919 * (uint64_t(n) + 1) + attempt);
      for (int64_t e = 0; e < s.E; ++e) {
        const double ge = g[e];
        if (s.bias) {
          const double sig = 0.25 + 0.5 * ge - b[e];
          x[n * s.E + e] = float(std::log(sig / (1.0 - sig)));
        } else {
          x[n * s.E + e] = float(-3.0 + 6.0 * ge);
        }
      }
      if (s.num_groups == 0 || groups_separated(s, selection_values(s, x + n * s.E, b))) break;
      HYTRA_CHECK(attempt < 1000, "moe_router parity: no separated group scores after 1000 draws");
    }
  }
  return in;
}

// The outputs of one run, registered as two cases: the floating outputs by rtol, the integer
// ones (names in `exact`) bit for bit.
void register_split(const std::string& op, const std::string& shape,
                    std::function<std::vector<Output>(uint64_t)> run, std::set<std::string> exact) {
  for (bool want_exact : {false, true}) {
    Case c = make_case(op, shape + (want_exact ? " ids" : ""), DType::F32, [=](uint64_t seed) {
      std::vector<Output> keep;
      for (Output& o : run(seed))
        if (bool(exact.count(o.name)) == want_exact) keep.push_back(o);
      return keep;
    });
    if (want_exact) {
      c.criterion = Criterion::Exact;
      c.tol = 0;
    }
    register_case(c);
  }
}

void add_router(const RouterSpec& s) {
  register_split("moe_router_fwd", shape_of(s), [s](uint64_t seed) {
    RouterInputs in = router_inputs(s, seed);
    Tensor pg = dev_empty({s.N, s.k}, DType::F32), tg = dev_empty({s.N, s.k}, DType::I32);
    Tensor pc = cpu_empty({s.N, s.k}), tc = Tensor::empty({s.N, s.k}, DType::I32);
    Tensor bg = in.bias.defined() ? dev(in.bias) : Tensor();
    ops::moe_router_fwd(gpu(), pg, tg, dev(in.logits), bg, s.k, s.score, s.pre_softmax, s.num_groups,
                        s.group_topk, s.scaling);
    ops::moe_router_fwd(cpu(), pc, tc, in.logits, in.bias, s.k, s.score, s.pre_softmax, s.num_groups, s.group_topk,
                        s.scaling);
    return std::vector<Output>{{"probs", pg, pc}, {"top", tg, tc}};
  }, {"top"});
  register_case(make_case("moe_router_bwd", shape_of(s), DType::F32, [s](uint64_t seed) {
    RouterInputs in = router_inputs(s, seed);
    Tensor probs = cpu_empty({s.N, s.k}), top = Tensor::empty({s.N, s.k}, DType::I32);
    ops::moe_router_fwd(cpu(), probs, top, in.logits, in.bias, s.k, s.score, s.pre_softmax, s.num_groups,
                        s.group_topk, s.scaling);
    Tensor dprobs = rand({s.N, s.k}, DType::F32, seed + 2), junk = rand({s.N, s.E}, DType::F32, seed + 3);
    Tensor dg = dev(junk), dc = ref(junk);  // overwritten
    ops::moe_router_bwd(gpu(), dg, dev(dprobs), dev(in.logits), dev(top), s.score, s.pre_softmax, s.scaling);
    ops::moe_router_bwd(cpu(), dc, dprobs, in.logits, top, s.score, s.pre_softmax, s.scaling);
    return std::vector<Output>{{"dlogits", dg, dc}};
  }));
}

struct AuxSpec {
  int64_t N, E, k;
  RouterScore score;
  int64_t num_seqs;
  bool global, with_grad;
};

void add_aux(const AuxSpec& s) {
  std::string shape = "N=" + dims({s.N}) + " E=" + dims({s.E}) + " k=" + dims({s.k}) + " seqs=" + dims({s.num_seqs});
  shape += s.score == RouterScore::Sigmoid ? " sig" : " soft";
  if (s.global) shape += " global";
  if (!s.with_grad) shape += " no-grad";
  register_split("moe_aux_loss", shape, [s](uint64_t seed) {
    RouterSpec rs{s.N, s.E, s.k, RouterScore::Softmax, false, false, 0, 0, 1.0};
    Tensor logits = router_inputs(rs, seed).logits;
    const int64_t T = s.N / s.num_seqs;
    const double coeff = 0.01, grad_scale = 0.5, size = coeff / double(T * s.E);  // ~ the gradient
    Tensor global = s.global ? rand({1, s.E}, DType::F32, seed + 1, 0.0, double(2 * T * s.k / s.E)) : Tensor();
    Tensor d0 = rand({s.N, s.E}, DType::F32, seed + 2, -size, size);
    Tensor lg = dev_empty({1}, DType::F32), cg = dev_empty({s.num_seqs, s.E}, DType::F32);
    Tensor lc = cpu_empty({1}), cc = cpu_empty({s.num_seqs, s.E});
    Tensor dg = s.with_grad ? dev(d0) : Tensor(), dc = s.with_grad ? ref(d0) : Tensor();
    ops::moe_aux_loss(gpu(), lg, cg, dg, dev(logits), s.global ? dev(global) : Tensor(), s.k, s.score, s.num_seqs,
                      coeff, grad_scale);
    ops::moe_aux_loss(cpu(), lc, cc, dc, logits, global, s.k, s.score, s.num_seqs, coeff, grad_scale);
    std::vector<Output> out{{"loss", lg, lc}, {"counts", cg, cc}};
    if (s.with_grad) out.push_back({"dlogits", dg, dc});
    return out;
  }, {"counts"});
}

void add_z(int64_t N, int64_t E) {
  register_case(make_case("moe_z_loss", "N=" + dims({N}) + " E=" + dims({E}), DType::F32, [=](uint64_t seed) {
    Tensor logits = rand({N, E}, DType::F32, seed, -4.0, 4.0);
    const double coeff = 1e-3, grad_scale = 2.0, size = coeff / double(N * E);
    Tensor d0 = rand({N, E}, DType::F32, seed + 1, -size, size);
    Tensor lg = dev_empty({1}, DType::F32), lc = cpu_empty({1});
    Tensor dg = dev(d0), dc = ref(d0);
    ops::moe_z_loss(gpu(), lg, dg, dev(logits), coeff, grad_scale);
    ops::moe_z_loss(cpu(), lc, dc, logits, coeff, grad_scale);
    return std::vector<Output>{{"loss", lg, lc}, {"dlogits", dg, dc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(moe_router) {
  const RouterScore soft = RouterScore::Softmax, sig = RouterScore::Sigmoid;
  const RouterSpec routers[] = {
      {37, 8, 2, soft, false, false, 0, 0, 1.0},
      {37, 8, 1, soft, true, false, 0, 0, 1.0},
      {37, 8, 1, sig, false, false, 0, 0, 1.0},
      {37, 8, 2, sig, false, true, 4, 2, 1.0},
      {301, 64, 6, soft, false, false, 0, 0, 1.0},
      {301, 64, 6, soft, true, false, 0, 0, 2.0},
      {301, 64, 6, sig, false, false, 0, 0, 1.0},
      {301, 64, 6, sig, false, true, 0, 0, 2.5},
      {301, 64, 6, soft, true, false, 8, 3, 1.0},
      {301, 64, 2, soft, false, false, 8, 2, 1.0},
      {1003, 256, 2, soft, false, false, 0, 0, 1.0},
      {1003, 256, 6, soft, true, false, 8, 2, 1.0},
      {1003, 256, 8, sig, false, true, 8, 4, 2.5},
      {1003, 256, 6, sig, false, false, 16, 3, 1.0},
  };
  for (const RouterSpec& s : routers) add_router(s);
  const AuxSpec auxes[] = {
      {37, 8, 2, soft, 1, false, true},      {301, 64, 6, sig, 1, false, true},
      {1003, 256, 8, soft, 1, false, true},  {1015, 64, 6, soft, 5, false, true},
      {4096, 256, 8, sig, 4, false, true},   {1003, 256, 6, soft, 1, true, true},
      {512, 64, 2, sig, 2, false, false},
  };
  for (const AuxSpec& s : auxes) add_aux(s);
  add_z(37, 8);
  add_z(301, 64);
  add_z(1003, 256);
}

}  // namespace hytra::parity
