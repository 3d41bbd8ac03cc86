// The MoE router ops on the CPU (ops/cpu/moe_router.cpp): the docs/spec/moe.md §2 vectors, hand-checked
// routing in every mode (group-limited masking and tie-breaking included), and fp64 central
// differences of moe_router_bwd (through probs, at points where the selection is stable) and of
// the aux and z losses' dlogits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/random.h"
#include "ops/ops.h"

namespace hytra {
namespace {

using ops::RouterScore;

Tensor make(const Shape& shape, const std::vector<double>& v, DType dt = DType::F64) {
  Tensor t = Tensor::empty(shape, dt);
  t.copy_from_f64(v);
  return t;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Routed {
  std::vector<double> probs, top;
};

struct RouterMode {
  RouterScore score = RouterScore::Softmax;
  bool pre_softmax = false;
  int64_t num_groups = 0, group_topk = 0;
  double scaling = 1.0;
  std::vector<double> bias;  // empty: no expert bias
};

Routed route(const Tensor& logits, int64_t k, const RouterMode& m) {
  const int64_t N = logits.size(0), E = logits.size(1);
  Tensor probs = Tensor::empty({N, k}, logits.dtype()), top = Tensor::empty({N, k}, DType::I32);
  Tensor bias = m.bias.empty() ? Tensor() : make({E}, m.bias, logits.dtype() == DType::F64 ? DType::F64 : DType::F32);
  ops::moe_router_fwd(Exec::cpu(), probs, top, logits, bias, k, m.score, m.pre_softmax, m.num_groups, m.group_topk,
                      m.scaling);
  return {probs.to_f64_vector(), top.to_f64_vector()};
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// ---- docs/spec/moe.md §2 vectors ------------------------------------------------------------------

const std::vector<double> kSpecScores = {.4, .3, .2, .1, .1, .2, .3, .4};  // (2,4), rows sum to 1

struct AuxOut {
  double loss;
  std::vector<double> counts;
};

AuxOut aux(const Tensor& logits, int64_t k, RouterScore score, int64_t num_seqs, double coeff,
           const Tensor& global_counts = Tensor()) {
  const DType st = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor loss = Tensor::empty({1}, st), counts = Tensor::empty({num_seqs, logits.size(1)}, st), none;
  ops::moe_aux_loss(Exec::cpu(), loss, counts, none, logits, global_counts, k, score, num_seqs, coeff, 1.0);
  return {loss.to_f64_vector()[0], counts.to_f64_vector()};
}

std::vector<double> log_of(const std::vector<double>& s) {
  std::vector<double> x;
  for (double v : s) x.push_back(std::log(v));
  return x;
}

TEST(MoeAuxLoss, SpecVectorIsCoeff) {
  for (DType dt : {DType::F64, DType::F32}) {
    Tensor logits = make({2, 4}, log_of(kSpecScores), dt);  // softmax(log s) = s
    AuxOut r = aux(logits, 2, RouterScore::Softmax, 1, 0.3);
    EXPECT_NEAR(r.loss, 0.3, 1e-6) << dtype_name(dt);
    expect_near_all(r.counts, {1, 1, 1, 1}, 0);
  }
  // Sigmoid: sigmoid(logit(s)) = s already sums to 1 per row.
  std::vector<double> x;
  for (double s : kSpecScores) x.push_back(std::log(s / (1 - s)));
  AuxOut r = aux(make({2, 4}, x), 2, RouterScore::Sigmoid, 1, 0.3);
  EXPECT_NEAR(r.loss, 0.3, 1e-12);
  expect_near_all(r.counts, {1, 1, 1, 1}, 0);
}

// seq_aux_loss (Megatron router.py _apply_seq_aux_loss): each sequence is its own token set with
// T = its length, and the sum over sequences is divided by their number.
TEST(MoeAuxLoss, PerSequenceNormalisation) {
  const std::vector<double> r0(kSpecScores.begin(), kSpecScores.begin() + 4);
  const std::vector<double> r1(kSpecScores.begin() + 4, kSpecScores.end());
  std::vector<double> alt, same;  // (4,4): [r0 r1 r0 r1] and [r0 r0 r1 r1]
  for (const auto* r : {&r0, &r1, &r0, &r1}) alt.insert(alt.end(), r->begin(), r->end());
  for (const auto* r : {&r0, &r0, &r1, &r1}) same.insert(same.end(), r->begin(), r->end());
  // Two balanced sequences: each is the docs/spec/moe.md §2 vector.
  EXPECT_NEAR(aux(make({4, 4}, log_of(alt)), 2, RouterScore::Softmax, 2, 0.3).loss, 0.3, 1e-12);
  // Sequence 0 uses experts {0,1} twice: P = [.8 .6 .4 .2], counts [2 2 0 0] -> 2.8; sequence 1
  // mirrors it. loss = coeff * 4 / (2 * 2^2) * (2.8 + 2.8) / 2 = 1.4 coeff.
  AuxOut r = aux(make({4, 4}, log_of(same)), 2, RouterScore::Softmax, 2, 0.3);
  EXPECT_NEAR(r.loss, 0.42, 1e-12);
  expect_near_all(r.counts, {2, 2, 0, 0, 0, 0, 2, 2}, 0);
  // As one token set the same batch is balanced.
  EXPECT_NEAR(aux(make({4, 4}, log_of(same)), 2, RouterScore::Softmax, 1, 0.3).loss, 0.3, 1e-12);
}

TEST(MoeAuxLoss, GlobalCountsReplaceCountsInTheLoss) {
  std::vector<double> x = log_of(kSpecScores);
  x.resize(4);
  const std::vector<double> row0 = x;
  x.insert(x.end(), row0.begin(), row0.end());  // two tokens of row 0: P = [.8 .6 .4 .2]
  AuxOut r = aux(make({2, 4}, x), 2, RouterScore::Softmax, 1, 0.3, make({1, 4}, {0, 0, 0, 4}));
  EXPECT_NEAR(r.loss, 0.3 * 4 / (2 * 4) * (0.2 * 4), 1e-12);
  expect_near_all(r.counts, {2, 2, 0, 0}, 0);  // the local counts, still
}

TEST(MoeZLoss, SpecVector) {
  for (DType dt : {DType::F64, DType::F32}) {
    Tensor logits = make({1, 2}, {0, 0}, dt);
    Tensor loss = Tensor::empty({1}, dt == DType::F64 ? DType::F64 : DType::F32);
    Tensor dlogits = make({1, 2}, {1.0, -2.0}, dt);
    ops::moe_z_loss(Exec::cpu(), loss, dlogits, logits, 0.1, 3.0);
    EXPECT_NEAR(loss.to_f64_vector()[0], 0.1 * std::log(2.0) * std::log(2.0), 1e-7);
    EXPECT_NEAR(0.1 * 0.480453, loss.to_f64_vector()[0], 1e-7);
    // d/dx_e = coeff * 2 lse / N * softmax_e = 0.1 * ln 2, times grad_scale 3, added on.
    expect_near_all(dlogits.to_f64_vector(), {1.0 + 0.3 * std::log(2.0), -2.0 + 0.3 * std::log(2.0)}, 1e-6);
  }
}

// ---- routing by hand -----------------------------------------------------------------------------

TEST(MoeRouterFwd, SoftmaxOverTheSelected) {
  RouterMode m;
  m.scaling = 2.0;
  Routed r = route(make({1, 4}, {1, 3, 2, 0}), 2, m);
  const double e = std::exp(1.0);
  expect_near_all(r.top, {1, 2}, 0);
  expect_near_all(r.probs, {2 * e / (e + 1), 2 / (e + 1)}, 1e-12);
}

TEST(MoeRouterFwd, PreSoftmax) {
  RouterMode m;
  m.pre_softmax = true;
  Routed r = route(make({1, 4}, {1, 3, 2, 0}), 2, m);
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  expect_near_all(r.top, {1, 2}, 0);
  expect_near_all(r.probs, {std::exp(3.0) / z, std::exp(2.0) / z}, 1e-12);
}

TEST(MoeRouterFwd, SigmoidNormalisedWhenKAboveOne) {
  RouterMode m;
  m.score = RouterScore::Sigmoid;
  Routed r = route(make({1, 4}, {1, 3, 2, 0}), 2, m);
  const double s3 = sigmoid(3), s2 = sigmoid(2);
  expect_near_all(r.top, {1, 2}, 0);
  expect_near_all(r.probs, {s3 / (s3 + s2), s2 / (s3 + s2)}, 1e-12);
  r = route(make({1, 4}, {1, 3, 2, 0}), 1, m);  // k = 1: the plain sigmoid
  expect_near_all(r.top, {1}, 0);
  expect_near_all(r.probs, {s3}, 1e-12);
}

TEST(MoeRouterFwd, ExpertBiasSelectsButDoesNotWeigh) {
  RouterMode m;
  m.score = RouterScore::Sigmoid;
  m.bias = {0, 0, 0, 1};  // sigmoid(0) + 1 = 1.5 beats sigmoid(3) = 0.95
  Routed r = route(make({1, 4}, {1, 3, 2, 0}), 2, m);
  const double s0 = sigmoid(0), s3 = sigmoid(3);
  expect_near_all(r.top, {3, 1}, 0);
  expect_near_all(r.probs, {s0 / (s0 + s3), s3 / (s0 + s3)}, 1e-12);
}

TEST(MoeRouterFwd, TiesGoToTheLowerIndex) {
  RouterMode m;
  Routed r = route(make({1, 5}, {2, 5, 5, 1, 5}), 3, m);
  expect_near_all(r.top, {1, 2, 4}, 0);
  expect_near_all(r.probs, {1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-12);
  m.pre_softmax = true;
  expect_near_all(route(make({1, 5}, {2, 5, 5, 1, 5}), 2, m).top, {1, 2}, 0);
  m.score = RouterScore::Sigmoid;
  expect_near_all(route(make({1, 5}, {2, 5, 5, 1, 5}), 2, m).top, {1, 2}, 0);
}

TEST(MoeRouterFwd, GroupLimitedMasksTheOtherGroups) {
  // 4 groups of 2, keep 2, k = 4: a group scores the sum of its top 4/2 = 2 logits:
  // g0 {9, -5} = 4, g1 {3, 3} = 6, g2 {2.5, 2.4} = 4.9, g3 {1, 1} = 2 -> g1 and g2 stay, so the
  // largest logit (expert 0) is not selectable.
  RouterMode m;
  m.num_groups = 4;
  m.group_topk = 2;
  const std::vector<double> x = {9, -5, 3, 3, 2.5, 2.4, 1, 1};
  Routed r = route(make({1, 8}, x), 4, m);
  expect_near_all(r.top, {2, 3, 4, 5}, 0);
  const double z = 2 * std::exp(3.0) + std::exp(2.5) + std::exp(2.4);
  expect_near_all(r.probs, {std::exp(3.0) / z, std::exp(3.0) / z, std::exp(2.5) / z, std::exp(2.4) / z}, 1e-12);
  // Without groups expert 0 wins.
  EXPECT_EQ(route(make({1, 8}, x), 4, RouterMode{}).top[0], 0);
}

TEST(MoeRouterFwd, GroupLimitedUsesBiasedScoresAndBreaksGroupTiesLow) {
  // Sigmoid + bias, 2 groups of 2, keep 1, k = 1: group scores are max(sigmoid + bias).
  RouterMode m;
  m.score = RouterScore::Sigmoid;
  m.num_groups = 2;
  m.group_topk = 1;
  m.bias = {0, 0, 0, 0};
  Routed r = route(make({1, 4}, {1, 4, 4, 0}), 1, m);  // both groups score sigmoid(4): group 0 kept
  expect_near_all(r.top, {1}, 0);
  expect_near_all(r.probs, {sigmoid(4)}, 1e-12);
  m.bias = {0, 0, 0, 2};  // group 1 now scores sigmoid(0) + 2
  r = route(make({1, 4}, {1, 4, 4, 0}), 1, m);
  expect_near_all(r.top, {3}, 0);
  expect_near_all(r.probs, {sigmoid(0)}, 1e-12);
}

// ---- finite differences --------------------------------------------------------------------------

// Logits in [-2, 2] at row-wise shuffled ranks r, x = -2 + 4 (2^r - 1) / (2^E - 1) (E <= 16): values,
// and sums of distinct values (the group scores), differ by at least 4 / (2^E - 1) >> the step,
// so central differences never change a selection.
Tensor distinct_logits(int64_t N, int64_t E, uint64_t seed) {
  std::vector<double> u = test::random_uniform({N, E}, DType::F64, seed).to_f64_vector();
  std::vector<double> x(u.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) {
      int64_t rank = 0;
      for (int64_t j = 0; j < E; ++j) rank += u[size_t(n * E + j)] < u[size_t(n * E + e)];
      x[size_t(n * E + e)] = -2.0 + 4.0 * (std::ldexp(1.0, int(rank)) - 1) / (std::ldexp(1.0, int(E)) - 1);
    }
  return make({N, E}, x);
}

constexpr double kStep = 1e-5;

// Central difference of f at every element of x, compared with the analytic gradient.
template <class F>
void check_gradient(Tensor x, const std::vector<double>& analytic, F&& f, const char* what) {
  std::vector<double> v = x.to_f64_vector();
  ASSERT_EQ(v.size(), analytic.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double v0 = v[i];
    v[i] = v0 + kStep;
    x.copy_from_f64(v);
    const double up = f(x);
    v[i] = v0 - kStep;
    x.copy_from_f64(v);
    const double down = f(x);
    v[i] = v0;
    x.copy_from_f64(v);
    const double numeric = (up - down) / (2 * kStep);
    EXPECT_NEAR(analytic[i], numeric, 1e-7 * std::max(1.0, std::fabs(numeric))) << what << " element " << i;
  }
}

void gradcheck_router(int64_t N, int64_t E, int64_t k, const RouterMode& m, uint64_t seed, const char* what) {
  Tensor x = distinct_logits(N, E, seed);
  Routed base = route(x, k, m);
  std::vector<double> r = test::random_uniform({N, k}, DType::F64, seed + 1).to_f64_vector();
  Tensor dprobs = make({N, k}, r), top = make({N, k}, base.top, DType::I32);
  Tensor dlogits = make({N, E}, std::vector<double>(size_t(N * E), 7.0));  // overwritten
  ops::moe_router_bwd(Exec::cpu(), dlogits, dprobs, x, top, m.score, m.pre_softmax, m.scaling);
  check_gradient(x, dlogits.to_f64_vector(), [&](const Tensor& xp) {
    Routed p = route(xp, k, m);
    EXPECT_EQ(p.top, base.top) << what << ": the selection moved";
    double L = 0;
    for (size_t i = 0; i < r.size(); ++i) L += r[i] * p.probs[i];
    return L;
  }, what);
}

TEST(MoeRouterBwd, MatchesFiniteDifferences) {
  RouterMode post, pre, sig, sig_bias, grouped;
  post.scaling = 1.5;
  pre.pre_softmax = true;
  pre.scaling = 2.5;
  sig.score = RouterScore::Sigmoid;
  sig_bias = sig;
  sig_bias.bias = {0.3, -0.2, 0.1, 0.0, -0.4, 0.25, 0.05, -0.1};
  sig_bias.scaling = 2.0;
  grouped.num_groups = 4;
  grouped.group_topk = 2;
  gradcheck_router(3, 8, 2, post, 11, "softmax k=2");
  gradcheck_router(3, 8, 3, pre, 12, "pre-softmax k=3");
  gradcheck_router(3, 8, 1, pre, 13, "pre-softmax k=1");
  gradcheck_router(3, 8, 3, sig, 14, "sigmoid k=3");
  gradcheck_router(3, 8, 1, sig, 15, "sigmoid k=1");
  gradcheck_router(3, 8, 2, sig_bias, 16, "sigmoid+bias k=2");
  gradcheck_router(3, 8, 4, grouped, 17, "group-limited softmax k=4");
  grouped.pre_softmax = true;
  gradcheck_router(3, 8, 4, grouped, 18, "group-limited pre-softmax k=4");
}

void gradcheck_aux(int64_t N, int64_t E, int64_t k, RouterScore score, int64_t num_seqs, bool global,
                   uint64_t seed, const char* what) {
  Tensor x = distinct_logits(N, E, seed);
  Tensor g = global ? test::random_uniform({1, E}, DType::F64, seed + 1, 0.0, 3.0) : Tensor();
  const double coeff = 0.7, grad_scale = 1.3;
  std::vector<double> d0 = test::random_uniform({N, E}, DType::F64, seed + 2).to_f64_vector();
  Tensor loss = Tensor::empty({1}, DType::F64), counts = Tensor::empty({num_seqs, E}, DType::F64);
  Tensor dlogits = make({N, E}, d0);
  ops::moe_aux_loss(Exec::cpu(), loss, counts, dlogits, x, g, k, score, num_seqs, coeff, grad_scale);
  std::vector<double> analytic = dlogits.to_f64_vector();
  for (size_t i = 0; i < analytic.size(); ++i) analytic[i] = (analytic[i] - d0[i]) / grad_scale;
  const std::vector<double> c0 = counts.to_f64_vector();
  check_gradient(x, analytic, [&](const Tensor& xp) {
    AuxOut o = aux(xp, k, score, num_seqs, coeff, g);
    EXPECT_EQ(o.counts, c0) << what << ": the counts moved";
    return o.loss;
  }, what);
}

TEST(MoeAuxLoss, DlogitsMatchFiniteDifferences) {
  gradcheck_aux(6, 8, 2, RouterScore::Softmax, 1, false, 21, "softmax");
  gradcheck_aux(6, 8, 3, RouterScore::Sigmoid, 1, false, 22, "sigmoid");
  gradcheck_aux(6, 8, 2, RouterScore::Softmax, 3, false, 23, "softmax, 3 sequences");
  gradcheck_aux(6, 8, 2, RouterScore::Sigmoid, 2, false, 24, "sigmoid, 2 sequences");
  gradcheck_aux(6, 8, 2, RouterScore::Softmax, 1, true, 25, "softmax, global counts");
}

TEST(MoeZLoss, DlogitsMatchFiniteDifferences) {
  Tensor x = test::random_uniform({5, 7}, DType::F64, 31, -3.0, 3.0);
  const double coeff = 0.05, grad_scale = 2.0;
  std::vector<double> d0 = test::random_uniform({5, 7}, DType::F64, 32).to_f64_vector();
  Tensor loss = Tensor::empty({1}, DType::F64), dlogits = make({5, 7}, d0);
  ops::moe_z_loss(Exec::cpu(), loss, dlogits, x, coeff, grad_scale);
  std::vector<double> analytic = dlogits.to_f64_vector();
  for (size_t i = 0; i < analytic.size(); ++i) analytic[i] = (analytic[i] - d0[i]) / grad_scale;
  check_gradient(x, analytic, [&](const Tensor& xp) {
    Tensor l = Tensor::empty({1}, DType::F64), d = Tensor::zeros({5, 7}, DType::F64);
    ops::moe_z_loss(Exec::cpu(), l, d, xp, coeff, grad_scale);
    return l.to_f64_vector()[0];
  }, "z-loss");
}

}  // namespace
}  // namespace hytra
