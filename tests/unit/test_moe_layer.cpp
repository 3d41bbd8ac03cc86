// The MoE layer's equivalences (issue 7): one expert with top-1 routing is the dense MLP (up to the
// rounding of two activation kernels); the GLU interleaved and plain layouts give bitwise-identical
// outputs and fc1 gradients (dx to rounding: its sum runs over the permuted rows); single-grouped
// and per-expert weights, and delayed and immediate weight gradients, give identical results. The token dispatcher's plan (capacity,
// drop policies, padding) and the expert-bias update rule on hand-checked cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "common/compare.h"
#include "common/random.h"
#include "nn/mlp.h"
#include "nn/moe/moe_layer.h"
#include "ops/ops.h"
#include "unit/host_dispatch_plan.h"

namespace hytra {
namespace {

constexpr int64_t B = 2, T = 5, C = 6, F = 4, E = 4;

MoeOptions options(ops::ExpertActivation act = ops::ExpertActivation::SwiGLU) {
  MoeOptions o;
  o.hidden = C;
  o.router.hidden = C;
  o.router.num_experts = E;
  o.router.topk = 2;
  o.router.init_std = 0.5;
  o.dispatch.num_experts = E;
  o.dispatch.topk = 2;
  o.experts.hidden = C;
  o.experts.ffn = F;
  o.experts.num_experts = E;
  o.experts.activation = act;
  o.experts.init_std = o.experts.output_init_std = 0.5;
  return o;
}

struct LayerRun {
  Tensor y, dx;
  std::map<std::string, Tensor> grads;
};

// Forward and backward of `m` (parameters in `store`, already finalized and filled) on fixed data.
LayerRun run(Module& m, ParamStore& store, bool delay = false) {
  Tensor x = test::random_uniform({B, T, C}, DType::F32, 5, -1.0, 1.0);
  Tensor dy = test::random_uniform({B, T, C}, DType::F32, 6, -1.0, 1.0);
  StepContext ctx(Exec::cpu());
  ctx.delay_wgrad = delay;
  LayerRun r;
  r.y = m.forward(ctx, x).clone();
  r.dx = m.backward(ctx, dy).clone();
  if (delay) {
    m.backward_dw(ctx);
    EXPECT_EQ(ctx.pending_wgrad(), 0u);
  }
  for (const Param* p : store.all()) r.grads[p->name] = p->grad.clone();
  return r;
}

void fill_from(ParamStore& store, uint64_t seed) {
  store.finalize(DType::F32, Device::CPU);
  init_params(store, seed);
}

TEST(MoeLayer, OneExpertTopOneIsTheDenseMlp) {
  MoeOptions o = options();
  o.router.num_experts = o.dispatch.num_experts = o.experts.num_experts = 1;
  o.router.topk = o.dispatch.topk = 1;
  o.router.pre_softmax = true;  // softmax over one expert: probability exactly 1
  ParamStore ms;
  MoeLayer moe(o, "decoder.layers.0.", 1, ms);
  fill_from(ms, 3);
  MlpOptions d;
  d.hidden = C;
  d.ffn = F;
  d.activation = Activation::SwiGLU;
  ParamStore ds;
  Mlp mlp(d, "decoder.layers.0.", ds);
  ds.finalize(DType::F32, Device::CPU);
  auto copy = [&](const std::string& from, const std::string& to) {
    ops::copy(Exec::cpu(), ds.find(to)->value, ms.find(from)->value);
  };
  copy("decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.mlp.linear_fc1.layer_norm_weight");
  copy("decoder.layers.0.mlp.experts.linear_fc1.weight0", "decoder.layers.0.mlp.linear_fc1.weight");
  copy("decoder.layers.0.mlp.experts.linear_fc2.weight0", "decoder.layers.0.mlp.linear_fc2.weight");
  LayerRun a = run(moe, ms), b = run(mlp, ds);
  const test::Tolerance tol = test::tol_for(DType::F32);  // two activation kernels: rounding only
  EXPECT_TRUE(test::all_close(a.y, b.y, tol));
  EXPECT_TRUE(test::all_close(a.dx, b.dx, tol));
  EXPECT_TRUE(test::all_close(a.grads["decoder.layers.0.mlp.experts.linear_fc1.weight0"],
                              b.grads["decoder.layers.0.mlp.linear_fc1.weight"], tol));
  EXPECT_TRUE(test::all_close(a.grads["decoder.layers.0.mlp.experts.linear_fc2.weight0"],
                              b.grads["decoder.layers.0.mlp.linear_fc2.weight"], tol));
  EXPECT_TRUE(test::all_close(a.grads["decoder.layers.0.pre_mlp_layernorm.weight"],
                              b.grads["decoder.layers.0.mlp.linear_fc1.layer_norm_weight"], tol));
  // The router's weight gets no gradient: the probability of the only expert is constant.
  for (double g : a.grads["decoder.layers.0.mlp.router.weight"].to_f64_vector()) EXPECT_EQ(g, 0.0);
}

// docs/spec/names.md §7: interleaved fc1 row r holds gate row b*I+w (w < I) or linear row b*I+w-I
// (b = r / 2I, w = r % 2I). Rows of the plain [gate; linear] weight moved there give the same layer.
TEST(MoeLayer, GluInterleavedEqualsPlainAfterTheRowPermutation) {
  for (int64_t I : {1, 2}) {
    for (auto act : {ops::ExpertActivation::SwiGLU, ops::ExpertActivation::QuickGeGLU}) {
      MoeOptions plain = options(act), inter = options(act);
      inter.experts.glu_interleave = I;
      ParamStore ps, is;
      MoeLayer a(plain, "decoder.layers.0.", 1, ps), b(inter, "decoder.layers.0.", 1, is);
      fill_from(ps, 7);
      fill_from(is, 7);
      std::vector<int64_t> src(size_t(2 * F));  // interleaved row r <- plain row src[r]
      for (int64_t r = 0; r < 2 * F; ++r) {
        const int64_t blk = r / (2 * I), w = r % (2 * I);
        src[size_t(r)] = w < I ? blk * I + w : F + blk * I + (w - I);
      }
      auto permute_rows = [&](const Tensor& from, Tensor& to) {  // (2F, C) each
        std::vector<double> f = from.to_f64_vector(), t(f.size());
        for (int64_t r = 0; r < 2 * F; ++r)
          for (int64_t c = 0; c < C; ++c) t[size_t(r * C + c)] = f[size_t(src[size_t(r)] * C + c)];
        to.copy_from_f64(t);
      };
      for (int64_t e = 0; e < E; ++e) {
        const std::string k = "decoder.layers.0.mlp.experts.linear_fc1.weight" + std::to_string(e);
        permute_rows(ps.find(k)->value, is.find(k)->value);
      }
      LayerRun ra = run(a, ps), rb = run(b, is);
      SCOPED_TRACE(testing::Message() << "I " << I << " act " << int(act));
      EXPECT_TRUE(test::bitwise_equal(ra.y, rb.y));
      // dx sums over the fc1 rows, whose order the permutation changes: equal up to rounding.
      EXPECT_TRUE(test::all_close(ra.dx, rb.dx, test::tol_for(DType::F32)));
      for (int64_t e = 0; e < E; ++e) {
        const std::string k = "decoder.layers.0.mlp.experts.linear_fc1.weight" + std::to_string(e);
        Tensor want = Tensor::empty({2 * F, C}, DType::F32);
        permute_rows(ra.grads[k], want);
        EXPECT_TRUE(test::bitwise_equal(want, rb.grads[k])) << k;
      }
    }
  }
}

TEST(MoeLayer, SingleGroupedWeightsEqualPerExpertWeights) {
  MoeOptions idx = options(), grp = options();
  idx.experts.bias = grp.experts.bias = true;
  grp.experts.weight_layout = grp.experts.bias_layout = ExpertLayout::Grouped;
  idx.shared_ffn = grp.shared_ffn = 3;
  ParamStore is, gs;
  MoeLayer a(idx, "decoder.layers.0.", 1, is), b(grp, "decoder.layers.0.", 1, gs);
  fill_from(is, 9);
  fill_from(gs, 9);  // Param::init_groups: the grouped tensors start with the per-expert values
  // Non-zero biases, written into both layouts.
  for (const char* proj : {"linear_fc1", "linear_fc2"}) {
    const std::string base = std::string("decoder.layers.0.mlp.experts.") + proj + ".";
    Tensor& grouped = gs.find(base + "bias")->value;
    const int64_t out = grouped.size(1);
    Tensor noise = test::random_uniform({E, out}, DType::F32, 11, -0.5, 0.5);
    ops::copy(Exec::cpu(), grouped, noise);
    for (int64_t e = 0; e < E; ++e) {
      Tensor& one = is.find(base + "bias" + std::to_string(e))->value;
      ops::copy(Exec::cpu(), one, noise.narrow(0, e, 1));
    }
  }
  for (int64_t e = 0; e < E; ++e)
    for (const char* proj : {"linear_fc1", "linear_fc2"}) {
      const std::string base = std::string("decoder.layers.0.mlp.experts.") + proj + ".weight";
      EXPECT_TRUE(test::bitwise_equal(is.find(base + std::to_string(e))->value,
                                      gs.find(base)->value.narrow(0, e, 1).view(is.find(base + "0")->shape)));
    }
  LayerRun ra = run(a, is), rb = run(b, gs);
  EXPECT_TRUE(test::bitwise_equal(ra.y, rb.y));
  EXPECT_TRUE(test::bitwise_equal(ra.dx, rb.dx));
  for (int64_t e = 0; e < E; ++e)
    for (const char* kind : {"weight", "bias"})
      for (const char* proj : {"linear_fc1", "linear_fc2"}) {
        const std::string base = std::string("decoder.layers.0.mlp.experts.") + proj + "." + kind;
        const Tensor& g = rb.grads[base];
        Shape one = g.shape();
        one.erase(one.begin());
        EXPECT_TRUE(test::bitwise_equal(ra.grads[base + std::to_string(e)], g.narrow(0, e, 1).view(one))) << base << e;
      }
}

TEST(MoeLayer, DelayedWgradGivesIdenticalGradients) {
  MoeOptions o = options();
  o.experts.bias = true;
  o.shared_ffn = 3;
  o.shared_gate = true;
  ParamStore s1, s2;
  MoeLayer a(o, "decoder.layers.0.", 1, s1), b(o, "decoder.layers.0.", 1, s2);
  fill_from(s1, 13);
  fill_from(s2, 13);
  LayerRun ra = run(a, s1, false), rb = run(b, s2, true);
  EXPECT_TRUE(test::bitwise_equal(ra.dx, rb.dx));
  for (const auto& [name, g] : ra.grads) EXPECT_TRUE(test::bitwise_equal(g, rb.grads[name])) << name;
}

// Plans on N = 4 tokens, k = 1, 2 experts: tokens 0, 1, 3 pick expert 0, token 2 expert 1.
TEST(TokenDispatcher, CapacityDropPoliciesAndPadding) {
  const std::vector<int32_t> top = {0, 0, 1, 0};
  const std::vector<double> probs = {0.2, 0.9, 0.6, 0.5};
  DispatchOptions o;
  o.num_experts = 2;
  o.topk = 1;
  auto ints = [](const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int32_t>()[i];
    return v;
  };
  HostPlan dropless = host_dispatch_plan(top, probs, 4, o, Device::CPU);
  EXPECT_EQ(dropless.rows_per_expert, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(ints(dropless.row_token), (std::vector<int32_t>{0, 1, 3, 2}));  // expert-major, token order kept
  EXPECT_EQ(ints(dropless.token_offsets), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ints(dropless.token_rows), (std::vector<int32_t>{0, 1, 3, 2}));

  o.capacity_factor = 1.0;  // capacity ceil(4 * 1 / 2 * 1) = 2
  HostPlan by_prob = host_dispatch_plan(top, probs, 4, o, Device::CPU);
  EXPECT_EQ(by_prob.routed_per_expert, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ints(by_prob.row_token), (std::vector<int32_t>{1, 3, 2}));  // token 0 (p 0.2) dropped
  EXPECT_EQ(ints(by_prob.prob_offsets), (std::vector<int32_t>{0, 0, 1, 2, 3}));  // its choice gets no row
  o.drop_by_position = true;
  HostPlan by_pos = host_dispatch_plan(top, probs, 4, o, Device::CPU);
  EXPECT_EQ(ints(by_pos.row_token), (std::vector<int32_t>{0, 1, 2}));  // token 3 dropped
  o.pad_to_capacity = true;
  HostPlan padded = host_dispatch_plan(top, probs, 4, o, Device::CPU);
  EXPECT_EQ(padded.rows_per_expert, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ints(padded.row_token), (std::vector<int32_t>{0, 1, 0, 2}));  // expert 1 filled with token 0
  EXPECT_EQ(ints(padded.row_prob), (std::vector<int32_t>{0, 1, 4, 2}));  // 4 = N*K: probability 0
  // A capacity past the token count (or past int64: 1e300) is the token count: every expert padded to N.
  for (double huge : {3.0, 1e18, 1e300}) {
    o.capacity_factor = huge;
    HostPlan all = host_dispatch_plan(top, probs, 4, o, Device::CPU);
    EXPECT_EQ(all.routed_per_expert, (std::vector<int64_t>{3, 1})) << huge;
    EXPECT_EQ(all.rows_per_expert, (std::vector<int64_t>{4, 4})) << huge;
  }

  DispatchOptions q;
  q.num_experts = 2;
  q.topk = 1;
  q.pad_multiple = 2;  // counts 3 and 1 -> 4 and 2
  HostPlan quant = host_dispatch_plan(top, probs, 4, q, Device::CPU);
  EXPECT_EQ(quant.rows_per_expert, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(quant.routed_per_expert, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(ints(quant.row_token), (std::vector<int32_t>{0, 1, 2, 3, 0, 2}));
}

// The dropless plan built by ops::moe_plan_dropless is the host plan's: every field, for random routings
// (K distinct experts a token; some experts without tokens) and top-k 1, 3 and 8, one set of kept
// offsets rebuilt as N and K change.
TEST(TokenDispatcher, DroplessPlanOpEqualsTheHostPlan) {
  auto ints = [](const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int32_t>()[i];
    return v;
  };
  DroplessOffsets offsets;  // shared by the routings below
  uint64_t state = 12345;
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (auto [N, K, E] : {std::tuple<int64_t, int64_t, int64_t>{50, 1, 8}, {37, 3, 16}, {20, 8, 40}}) {
    std::vector<int32_t> top;
    for (int64_t t = 0; t < N; ++t) {
      std::vector<int32_t> pool;
      for (int32_t e = 0; e < int32_t(E); e += 2) pool.push_back(e);  // odd experts never chosen
      for (int64_t j = 0; j < K; ++j) {
        const size_t pick = size_t(next() % pool.size());
        top.push_back(pool[pick]);
        pool.erase(pool.begin() + int64_t(pick));
      }
    }
    DispatchOptions o;
    o.num_experts = E;
    o.topk = K;
    ASSERT_TRUE(plan_is_dropless(o));
    const HostPlan host = host_dispatch_plan(top, std::vector<double>(top.size(), 0.5), N, o, Device::CPU);
    Tensor top_t = Tensor::empty({N, K}, DType::I32);
    std::copy(top.begin(), top.end(), top_t.data<int32_t>());
    Tensor counts = Tensor::zeros({E}, DType::I32);
    const DispatchPlan op = plan_dropless(Exec::cpu(), top_t, o, offsets, counts);  // rebuilt as N and K change
    EXPECT_EQ(op.rows, host.rows);
    const std::vector<int32_t> routed = ints(counts);
    EXPECT_EQ(std::vector<int64_t>(routed.begin(), routed.end()), host.routed_per_expert);
    for (auto [a, b] : {std::pair{&op.expert_offsets, &host.expert_offsets}, {&op.row_token, &host.row_token},
                        {&op.row_prob, &host.row_prob},
                        {&op.token_offsets, &host.token_offsets}, {&op.token_rows, &host.token_rows},
                        {&op.prob_offsets, &host.prob_offsets}, {&op.prob_rows, &host.prob_rows}})
      EXPECT_EQ(ints(*a), ints(*b)) << "N " << N << " K " << K;
  }
  DispatchOptions capped;
  capped.capacity_factor = 1.0;
  EXPECT_FALSE(plan_is_dropless(capped));
}

// The capacity plan built by ops::moe_plan_capacity (plan_capacity) is the host plan's, field by field over
// its used rows, with the fixed values past them: random routings (some experts without tokens, one expert
// taking most first choices), probabilities from three values (many ties), every drop policy and padding
// combination, capacities below and above N, top-k 1 to 8, fp32 and fp64 probabilities.
TEST(TokenDispatcher, CapacityPlanOpEqualsTheHostPlan) {
  auto ints = [](const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int32_t>()[i];
    return v;
  };
  auto head = [](std::vector<int32_t> v, int64_t n) { return std::vector<int32_t>(v.begin(), v.begin() + n); };
  auto tail = [](std::vector<int32_t> v, int64_t n) { return std::vector<int32_t>(v.begin() + n, v.end()); };
  uint64_t state = 777;
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  int cases = 0;
  for (auto [N, K, E] : {std::tuple<int64_t, int64_t, int64_t>{40, 1, 8}, {33, 2, 6}, {25, 3, 16}, {12, 8, 10}}) {
    std::vector<int32_t> top;
    std::vector<double> probs;
    const double values[3] = {0.125, 0.25, 0.5};
    for (int64_t t = 0; t < N; ++t) {
      std::vector<int32_t> pool;
      for (int32_t e = 0; e < int32_t(E); ++e)
        if (e != 1) pool.push_back(e);  // expert 1 never chosen
      for (int64_t j = 0; j < K; ++j) {
        size_t pick = size_t(next() % pool.size());
        if (j == 0 && t % 3 != 0) pick = 0;  // expert 0 takes most first choices
        top.push_back(pool[pick]);
        pool.erase(pool.begin() + int64_t(pick));
        probs.push_back(values[next() % 3]);
      }
    }
    Tensor top_t = Tensor::empty({N, K}, DType::I32);
    std::copy(top.begin(), top.end(), top_t.data<int32_t>());
    for (double factor : {-1.0, 0.5, 1.0, 100.0})
      for (bool by_position : {false, true})
        for (bool pad_to_capacity : {false, true})
          for (int64_t multiple : {0, 3, 4}) {
            DispatchOptions o;
            o.num_experts = E;
            o.topk = K;
            o.capacity_factor = factor;
            o.drop_by_position = by_position;
            o.pad_to_capacity = pad_to_capacity && factor > 0;
            o.pad_multiple = multiple;
            if (plan_is_dropless(o) || (pad_to_capacity && factor <= 0)) continue;
            const DType dt = ++cases % 2 ? DType::F32 : DType::F64;
            Tensor probs_t = Tensor::empty({N, K}, dt);
            for (int64_t i = 0; i < N * K; ++i) {
              if (dt == DType::F32) {
                probs_t.data<float>()[i] = float(probs[size_t(i)]);
              } else {
                probs_t.data<double>()[i] = probs[size_t(i)];
              }
            }
            const HostPlan host = host_dispatch_plan(top, probs, N, o, Device::CPU);
            Tensor counts = Tensor::zeros({E}, DType::I32);
            const DispatchPlan op = plan_capacity(Exec::cpu(), top_t, probs_t, o, counts);
            const std::string what = "N " + std::to_string(N) + " K " + std::to_string(K) + " factor " +
                                     std::to_string(factor) + " position " + std::to_string(by_position) + " pad " +
                                     std::to_string(o.pad_to_capacity) + " multiple " + std::to_string(multiple);
            const int64_t R = host.rows, kept = int64_t(host.prob_rows.numel());
            ASSERT_GE(op.rows, R) << what;
            const std::vector<int32_t> routed = ints(counts);
            EXPECT_EQ(std::vector<int64_t>(routed.begin(), routed.end()), host.routed_per_expert) << what;
            EXPECT_EQ(ints(op.expert_offsets), ints(host.expert_offsets)) << what;
            EXPECT_EQ(head(ints(op.row_token), R), ints(host.row_token)) << what;
            EXPECT_EQ(tail(ints(op.row_token), R), std::vector<int32_t>(size_t(op.rows - R), 0)) << what;
            EXPECT_EQ(head(ints(op.row_prob), R), ints(host.row_prob)) << what;
            EXPECT_EQ(tail(ints(op.row_prob), R), std::vector<int32_t>(size_t(op.rows - R), int32_t(N * K))) << what;
            EXPECT_EQ(ints(op.token_offsets), ints(host.token_offsets)) << what;
            EXPECT_EQ(head(ints(op.token_rows), R), ints(host.token_rows)) << what;
            EXPECT_EQ(tail(ints(op.token_rows), R), std::vector<int32_t>(size_t(op.rows - R), 0)) << what;
            EXPECT_EQ(ints(op.prob_offsets), ints(host.prob_offsets)) << what;
            EXPECT_EQ(head(ints(op.prob_rows), kept), ints(host.prob_rows)) << what;
            EXPECT_EQ(tail(ints(op.prob_rows), kept), std::vector<int32_t>(size_t(N * K - kept), 0)) << what;
            if (o.pad_to_capacity) {
              EXPECT_EQ(op.rows, R) << what;  // the bound is exact
            }
          }
  }
  EXPECT_GT(cases, 100);
}

// The auxiliary losses act through backward (not the layer output): with df = 0 the router weight's
// gradient is exactly d(aux + z)/dW of the logged values, checked against central differences in
// fp64 for each balancing type (one micro-batch: global_aux_loss uses this batch's counts).
TEST(MoeLayer, AuxiliaryLossGradientsMatchTheirValues) {
  for (LoadBalancing type : {LoadBalancing::AuxLoss, LoadBalancing::SeqAuxLoss, LoadBalancing::GlobalAuxLoss}) {
    MoeOptions o = options();
    o.router.balancing = type;
    o.router.aux_coeff = 0.3;
    o.router.z_coeff = 0.2;
    ParamStore s;
    MoeLayer moe(o, "decoder.layers.0.", 1, s);
    s.finalize(DType::F64, Device::CPU);
    init_params(s, 19);
    const Tensor x = test::random_uniform({B, T, C}, DType::F64, 20, -1.0, 1.0);
    auto aux_value = [&]() {
      StepContext ctx(Exec::cpu());
      moe.forward(ctx, x);
      const double v = moe.stats().aux_loss + moe.stats().z_loss;
      moe.finish_step();
      return v;
    };
    {
      StepContext ctx(Exec::cpu());
      moe.forward(ctx, x);
      moe.backward(ctx, Tensor::zeros({B, T, C}, DType::F64));
      moe.finish_step();
    }
    Param* w = s.find("decoder.layers.0.mlp.router.weight");
    const std::vector<double> analytic = w->grad.to_f64_vector();
    std::vector<double> v = w->value.to_f64_vector();
    const double h = 1e-5;
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + h;
      w->value.copy_from_f64(v);
      const double up = aux_value();
      v[i] = keep - h;
      w->value.copy_from_f64(v);
      const double down = aux_value();
      v[i] = keep;
      w->value.copy_from_f64(v);
      const double numeric = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(numeric - analytic[i]) / std::max(1e-6, std::abs(numeric)));
    }
    EXPECT_LT(worst, 1e-6) << "load balancing " << int(type);
    EXPECT_GT(aux_value(), 0.0) << "load balancing " << int(type);
    double largest = 0;
    for (double g : analytic) largest = std::max(largest, std::abs(g));
    EXPECT_GT(largest, 1e-3) << "load balancing " << int(type);  // the losses do reach the router weight
  }
}

// Aux-loss-free balancing: after a step, bias += rate * sign(mean load - load).
TEST(MoeLayer, ExpertBiasMovesTowardBalance) {
  MoeOptions o = options();
  o.router.score = ops::RouterScore::Sigmoid;
  o.router.expert_bias = true;
  o.router.bias_update_rate = 0.25;
  ParamStore s;
  MoeLayer moe(o, "decoder.layers.0.", 1, s);
  fill_from(s, 17);
  run(moe, s);
  const std::vector<int64_t> load = moe.stats().tokens_per_expert;
  int64_t total = 0;
  for (int64_t l : load) total += l;
  EXPECT_EQ(total, B * T * 2);  // every token's two choices counted
  moe.finish_step();
  const std::vector<double> bias = s.find("decoder.layers.0.mlp.router.expert_bias")->value.to_f64_vector();
  for (int64_t e = 0; e < E; ++e) {
    const double d = double(total) / E - double(load[size_t(e)]);
    EXPECT_EQ(bias[size_t(e)], 0.25 * double((d > 0) - (d < 0))) << "expert " << e;
  }
  for (int64_t l : moe.stats().tokens_per_expert) EXPECT_EQ(l, 0);  // counters restart
}

}  // namespace
}  // namespace hytra
