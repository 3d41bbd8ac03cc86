// nn framework: flat parameter buffers, init reproducibility, delayed wgrad, canonical keys, and the
// attention QKV row layout against an independent naive implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/compare.h"
#include "common/random.h"
#include "core/error.h"
#include "core/philox.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/lm_head.h"
#include "nn/mlp.h"
#include "nn/tensor_parallel.h"
#include "ops/ops.h"

namespace hytra {
namespace {

Tensor f64(const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::empty(shape, DType::F64);
  t.copy_from_f64(v);
  return t;
}

std::vector<std::string> names(const ParamStore& s) {
  std::vector<std::string> out;
  for (const Param* p : s.all()) out.push_back(p->name + " " + shape_str(p->shape));
  return out;
}

TEST(ParamStore, ViewsAliasTheFlatBuffers) {
  ParamStore s;
  Param& a = s.create("a.weight", {2, 3}, InitKind::Normal, 1.0, false);
  Param& b = s.create("b.bias", {4}, InitKind::Zeros, 0.0, true);
  EXPECT_THROW(s.create("a.weight", {1}, InitKind::Ones, 0.0, true), Error);
  s.finalize(DType::F32, Device::CPU);
  EXPECT_EQ(s.num_elements(), 10);
  // Each parameter starts at a multiple of kAlign elements: b after a's 6 and 58 of zero padding.
  EXPECT_EQ(a.offset, 0);
  EXPECT_EQ(b.offset, ParamStore::kAlign);
  EXPECT_EQ(s.flat_values().numel(), 2 * ParamStore::kAlign);
  s.flat_values().data<float>()[ParamStore::kAlign + 1] = 3.5f;  // element 1 of b
  EXPECT_EQ(b.value.data<float>()[1], 3.5f);
  a.grad.data<float>()[0] = 1.0f;
  EXPECT_EQ(s.flat_grads().data<float>()[0], 1.0f);
  s.zero_grad();
  EXPECT_EQ(a.grad.data<float>()[0], 0.0f);
  EXPECT_EQ(s.find("b.bias"), &b);
  EXPECT_EQ(s.find("c"), nullptr);
}

// Shapes from size flags whose element count overflows int64 (alone or summed) name the parameter
// instead of reaching finalize() with a wrapped total.
TEST(ParamStore, OverflowingShapesNameTheParameter) {
  ParamStore s;
  s.create("a.weight", {3, int64_t(1) << 58}, InitKind::Normal, 1.0, false);  // not allocated here
  // Alone past int64, past it in fp64 bytes, past it summed with a.weight, negative.
  for (const Shape& shape :
       {Shape{int64_t(1) << 40, int64_t(1) << 40}, Shape{int64_t(1) << 61}, Shape{int64_t(1) << 59}, Shape{-1, 4}}) {
    try {
      s.create("b.weight", shape, InitKind::Normal, 1.0, false);
      ADD_FAILURE() << "no error for " << shape_str(shape);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parameter 'b.weight' of shape"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(s.num_elements(), 3 * (int64_t(1) << 58));
}

TEST(ParamStore, InitDependsOnSeedAndNameOnly) {
  auto make = [](bool reversed, uint64_t seed) {
    auto s = std::make_unique<ParamStore>();
    std::vector<std::string> order = {"x.weight", "y.weight", "z.layer_norm_weight"};
    if (reversed) std::reverse(order.begin(), order.end());
    for (const auto& n : order)
      s->create(n, {5, 7}, n[0] == 'z' ? InitKind::Ones : InitKind::Normal, 0.02, n[0] == 'z');
    s->finalize(DType::F32, Device::CPU);
    init_params(*s, seed);
    return s;
  };
  auto s1 = make(false, 7), s2 = make(true, 7), s3 = make(false, 8);
  for (const char* n : {"x.weight", "y.weight", "z.layer_norm_weight"})
    EXPECT_TRUE(test::bitwise_equal(s1->find(n)->value, s2->find(n)->value)) << n;
  EXPECT_FALSE(test::bitwise_equal(s1->find("x.weight")->value, s3->find("x.weight")->value));
  EXPECT_FALSE(test::bitwise_equal(s1->find("x.weight")->value, s1->find("y.weight")->value));
  for (double v : s1->find("z.layer_norm_weight")->value.to_f64_vector()) EXPECT_EQ(v, 1.0);
  double sq = 0;
  for (double v : s1->find("x.weight")->value.to_f64_vector()) sq += v * v;
  EXPECT_NEAR(std::sqrt(sq / 35), 0.02, 0.008);  // std of N(0, 0.02) over 35 draws
}

TEST(ParamStore, NormalInitIsPhiloxKeyedByName) {
  ParamStore s;
  Param& w = s.create("decoder.layers.0.mlp.linear_fc2.weight", {3, 50}, InitKind::Normal, 0.01, false);
  Param& b = s.create("decoder.layers.0.mlp.linear_fc2.bias", {3}, InitKind::Zeros, 0.0, true);
  s.finalize(DType::F32, Device::CPU);
  ops::fill(Exec::cpu(), b.value, 5.0);
  init_params(s, 123);
  const float* v = w.value.data<float>();
  const uint64_t stream = stream_id("decoder.layers.0.mlp.linear_fc2.weight");
  for (int64_t i = 0; i < w.value.numel(); ++i)
    ASSERT_EQ(v[i], float(0.01 * double(philox_normal(123, stream, uint64_t(i))))) << "element " << i;
  for (double x : b.value.to_f64_vector()) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(s.flat_grads().dtype(), DType::F32);
}

// A tensor-parallel shard of a tensor made of two parts along dim 1 (a GLU's halves, say: 2 and 4 columns of a
// (3, 6) tensor) over 2 ranks: rank r holds column r of the first part and columns 2 + 2r, 3 + 2r of the second.
// Its init is its slices of the whole tensor's Philox values, and placing both ranks' shards rebuilds the tensor.
TEST(ParamStore, TensorParallelShardsAreSlicesOfTheWholeTensor) {
  const uint64_t stream = stream_id("w");
  const auto whole = [&](int64_t row, int64_t col) {
    return float(0.5 * double(philox_normal(7, stream, uint64_t(row * 6 + col))));
  };
  Tensor rebuilt = Tensor::zeros({3, 6}, DType::F32);
  for (int rank = 0; rank < 2; ++rank) {
    ParamStore s;
    Param& w = s.create("w", {3, 3}, InitKind::Normal, 0.5, false);
    shard_param(w, TensorParallel{nullptr, 2, rank}, 1, {1, 2});
    EXPECT_EQ(w.full_shape(), (Shape{3, 6}));
    s.finalize(DType::F32, Device::CPU);
    init_params(s, 7);
    const int64_t cols[3] = {rank, 2 + 2 * rank, 3 + 2 * rank};
    for (int64_t row = 0; row < 3; ++row)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(w.value.data<float>()[row * 3 + j], whole(row, cols[j]))
            << "rank " << rank << " (" << row << ", " << j << ")";
    place_shard(Exec::cpu(), rebuilt, w.value, w.shard);
  }
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t col = 0; col < 6; ++col) EXPECT_EQ(rebuilt.data<float>()[row * 6 + col], whole(row, col));
}

TEST(ParamStore, GradsAreFp64ForFp64Values) {
  ParamStore s;
  s.create("w", {2, 2}, InitKind::Ones, 0.0, false);
  s.finalize(DType::F64, Device::CPU);
  EXPECT_EQ(s.flat_grads().dtype(), DType::F64);
  EXPECT_EQ(s.find("w")->grad.dtype(), DType::F64);
}

TEST(StepContext, SlotsAreTypedPerOwnerAndCleared) {
  struct A {
    int n = 0;
  };
  struct B {
    double d = 0;
  };
  StepContext ctx(Exec::cpu());
  int owner1 = 0, owner2 = 0;
  ctx.saved<A>(&owner1).n = 3;
  ctx.saved<B>(&owner2).d = 2.5;
  EXPECT_EQ(ctx.saved<A>(&owner1).n, 3);
  EXPECT_EQ(ctx.saved<B>(&owner2).d, 2.5);
  EXPECT_THROW(ctx.saved<B>(&owner1), Error);
  ctx.clear();
  EXPECT_EQ(ctx.saved<A>(&owner1).n, 0);
  std::vector<int> order;
  ctx.push_wgrad(&owner1, [&] { order.push_back(1); });
  ctx.push_wgrad(&owner2, [&] { order.push_back(2); });
  ctx.push_wgrad(&owner1, [&] { order.push_back(3); });
  ctx.push_wgrad(&owner2, [&] { order.push_back(4); });
  EXPECT_EQ(ctx.pending_wgrad(), 4u);
  ctx.run_wgrad(&owner2);
  EXPECT_EQ(order, (std::vector<int>{2, 4}));
  EXPECT_EQ(ctx.pending_wgrad(), 2u);
  ctx.run_wgrad();
  EXPECT_EQ(order, (std::vector<int>{2, 4, 1, 3}));
  EXPECT_EQ(ctx.pending_wgrad(), 0u);
}

// backward_dw of one layer runs that layer's queued GEMMs only (docs/spec/moe.md §7 owners).
TEST(StepContext, BackwardDwRunsOnlyTheLayersOwnTasks) {
  ParamStore s;
  AttentionOptions ao;
  ao.hidden = 8;
  ao.num_heads = 2;
  ao.num_kv_heads = 1;
  ao.head_dim = 4;
  SelfAttention attn(ao, "decoder.layers.0.", s);
  MlpOptions mo;
  mo.hidden = 8;
  mo.ffn = 12;
  Mlp mlp(mo, "decoder.layers.1.", s);
  s.finalize(DType::F32, Device::CPU);
  init_params(s, test::test_seed(70));
  Tensor x = test::random_uniform({1, 3, 8}, DType::F32, 71), dy = test::random_uniform({1, 3, 8}, DType::F32, 72);
  StepContext ctx(Exec::cpu());
  ctx.delay_wgrad = true;
  attn.forward(ctx, mlp.forward(ctx, x));
  mlp.backward(ctx, attn.backward(ctx, dy));
  EXPECT_EQ(ctx.pending_wgrad(), 4u);
  auto zero = [&](const char* name) {
    for (double g : s.find(name)->grad.to_f64_vector())
      if (g != 0.0) return false;
    return true;
  };
  EXPECT_TRUE(zero("decoder.layers.0.self_attention.linear_qkv.weight"));
  attn.backward_dw(ctx);
  EXPECT_EQ(ctx.pending_wgrad(), 2u);
  EXPECT_FALSE(zero("decoder.layers.0.self_attention.linear_qkv.weight"));
  EXPECT_FALSE(zero("decoder.layers.0.self_attention.linear_proj.weight"));
  EXPECT_TRUE(zero("decoder.layers.1.mlp.linear_fc1.weight"));
  EXPECT_TRUE(zero("decoder.layers.1.mlp.linear_fc2.weight"));
  mlp.backward_dw(ctx);
  EXPECT_EQ(ctx.pending_wgrad(), 0u);
  EXPECT_FALSE(zero("decoder.layers.1.mlp.linear_fc1.weight"));
}

TEST(Linear, ForwardMatchesNaiveLoop) {
  const int64_t N = 6, I = 5, O = 4;
  ParamStore s;
  Linear lin("l.", I, O, true, 0.5, s);
  s.finalize(DType::F64, Device::CPU);
  init_params(s, test::test_seed(20));
  Tensor bias = test::random_uniform({O}, DType::F64, 21);
  ops::copy(Exec::cpu(), s.find("l.bias")->value, bias);
  Tensor x = test::random_uniform({2, 3, I}, DType::F64, 22);
  StepContext ctx(Exec::cpu());
  Tensor y = lin.forward(ctx, x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, O}));
  auto W = s.find("l.weight")->value.to_f64_vector(), b = bias.to_f64_vector(), xs = x.to_f64_vector();
  std::vector<double> want(size_t(N * O));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double acc = b[size_t(o)];
      for (int64_t i = 0; i < I; ++i) acc += xs[size_t(n * I + i)] * W[size_t(o * I + i)];
      want[size_t(n * O + o)] = acc;
    }
  EXPECT_TRUE(test::all_close(y, f64({2, 3, O}, want), test::tol_for(DType::F64)));
}

// fc1 rows 0..F-1 are the gated (activated) half for SwiGLU (docs/spec/names.md §1); naive fp64 reference.
TEST(Mlp, ForwardMatchesNaiveLoopForEachActivation) {
  const int64_t Bn = 2, T = 3, C = 4, F = 5, N = Bn * T;
  uint64_t seed = 30;
  for (Activation act : {Activation::SwiGLU, Activation::GeLU, Activation::SquaredReLU, Activation::QuickGeGLU}) {
    MlpOptions o;
    o.hidden = C;
    o.ffn = F;
    o.activation = act;
    o.glu_linear_offset = 0.5;  // added to the linear half of the GLU activations
    o.init_std = o.output_init_std = 0.5;
    ParamStore s;
    Mlp mlp(o, "m.", s);
    s.finalize(DType::F64, Device::CPU);
    init_params(s, test::test_seed(seed));
    Tensor x = test::random_uniform({Bn, T, C}, DType::F64, seed + 1);
    seed += 2;
    StepContext ctx(Exec::cpu());
    Tensor y = mlp.forward(ctx, x);
    auto W1 = s.find("m.mlp.linear_fc1.weight")->value.to_f64_vector();
    auto W2 = s.find("m.mlp.linear_fc2.weight")->value.to_f64_vector();
    auto xs = x.to_f64_vector();
    std::vector<double> want(size_t(N * C), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const double* xr = &xs[size_t(n * C)];
      double ms = 0;
      for (int64_t c = 0; c < C; ++c) ms += xr[c] * xr[c] / double(C);
      const double rstd = 1.0 / std::sqrt(ms + 1e-5);
      auto fc1 = [&](int64_t row) {
        double acc = 0;
        for (int64_t c = 0; c < C; ++c) acc += W1[size_t(row * C + c)] * xr[c] * rstd;
        return acc;
      };
      for (int64_t f = 0; f < F; ++f) {
        const double g = fc1(f);
        double a = 0;
        switch (act) {
          case Activation::SwiGLU: a = g / (1.0 + std::exp(-g)) * (fc1(F + f) + 0.5); break;
          case Activation::GeLU: a = 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))); break;
          case Activation::SquaredReLU: a = g > 0 ? g * g : 0.0; break;
          case Activation::QuickGeGLU: a = g / (1.0 + std::exp(-1.702 * g)) * (fc1(F + f) + 0.5); break;
        }
        for (int64_t c = 0; c < C; ++c) want[size_t(n * C + c)] += W2[size_t(c * F + f)] * a;
      }
    }
    EXPECT_TRUE(test::all_close(y, f64({Bn, T, C}, want), test::tol_for(DType::F64))) << "activation " << int(act);
  }
}

// Per-token loss = logsumexp(h W^T) - logit[label]; label -1 gives 0.
TEST(OutputLayer, LossMatchesNaiveCrossEntropy) {
  const int64_t Bn = 2, T = 3, C = 4, V = 7, N = Bn * T;
  ParamStore s;
  OutputLayer head("output_layer.weight", V, C, 0.5, nullptr, s);
  s.finalize(DType::F64, Device::CPU);
  init_params(s, test::test_seed(40));
  Tensor h = test::random_uniform({Bn, T, C}, DType::F64, 41);
  Tensor labels = test::random_ids({Bn, T}, V, 42);
  labels.data<int32_t>()[4] = -1;
  StepContext ctx(Exec::cpu());
  Tensor loss = head.forward(ctx, h, labels);
  auto W = s.find("output_layer.weight")->value.to_f64_vector(), hs = h.to_f64_vector();
  std::vector<double> want(size_t(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t label = labels.data<int32_t>()[n];
    if (label < 0) continue;
    std::vector<double> logit(size_t(V), 0.0);
    double mx = -1e300, se = 0;
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t c = 0; c < C; ++c) logit[size_t(v)] += hs[size_t(n * C + c)] * W[size_t(v * C + c)];
      mx = std::max(mx, logit[size_t(v)]);
    }
    for (double l : logit) se += std::exp(l - mx);
    want[size_t(n)] = mx + std::log(se) - logit[size_t(label)];
  }
  EXPECT_TRUE(test::all_close(loss, f64({Bn, T}, want), test::tol_for(DType::F64)));
  EXPECT_EQ(loss.to_f64_vector()[4], 0.0);
}

// With the loss gradient given to forward, the head computes dh and dW there (one logits pass):
// the same values as the forward-then-backward path, and backward returns them for that dloss only.
TEST(OutputLayer, GradientsInForwardEqualBackwardPath) {
  const int64_t Bn = 2, T = 5, C = 6, V = 11;
  ParamStore s;
  OutputLayer head("output_layer.weight", V, C, 0.5, nullptr, s);
  s.finalize(DType::F64, Device::CPU);
  init_params(s, test::test_seed(43));
  Tensor h = test::random_uniform({Bn, T, C}, DType::F64, 44);
  Tensor labels = test::random_ids({Bn, T}, V, 45);
  labels.data<int32_t>()[3] = -1;
  Tensor dloss = test::random_uniform({Bn, T}, DType::F64, 46);
  StepContext late(Exec::cpu());
  Tensor loss_late = head.forward(late, h, labels);
  Tensor dh_late = head.backward(late, dloss);
  Tensor dw_late = s.find("output_layer.weight")->grad.clone();
  s.zero_grad();
  StepContext early(Exec::cpu());
  Tensor loss_early = head.forward(early, h, labels, dloss);
  Tensor dw_early = s.find("output_layer.weight")->grad.clone();  // already there after forward
  Tensor dh_early = head.backward(early, dloss);
  EXPECT_TRUE(test::bitwise_equal(loss_early, loss_late));
  EXPECT_TRUE(test::bitwise_equal(dh_early, dh_late));
  EXPECT_TRUE(test::bitwise_equal(dw_early, dw_late));
  double dw_abs = 0;
  for (double v : dw_early.to_f64_vector()) dw_abs += std::abs(v);
  EXPECT_GT(dw_abs, 0.0);
  Tensor other = dloss.clone();
  EXPECT_THROW(head.backward(early, other), Error);
}

// The fused op's argument errors name the argument.
TEST(OutputLayer, FusedLossAndGradientOpNamesBadArguments) {
  const int64_t N = 4, C = 3, V = 5;
  Tensor x = test::random_uniform({N, C}, DType::F32, 47), w = test::random_uniform({V, C}, DType::F32, 48);
  Tensor labels = test::random_ids({N}, V, 49), dloss = test::random_uniform({N}, DType::F32, 50);
  Tensor loss = Tensor::empty({N}, DType::F32), dx = Tensor::empty({N, C}, DType::F32);
  Tensor dw = Tensor::zeros({V, C}, DType::F32), bad_dx = Tensor::empty({N, C + 1}, DType::F32);
  auto message = [&](auto call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Exec& ex = Exec::cpu();
  EXPECT_NE(message([&] { ops::lm_head_ce_fwd_bwd(ex, loss, dx, dw, x, w, labels, dloss, 0); }).find("token_chunk"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::lm_head_ce_fwd_bwd(ex, loss, bad_dx, dw, x, w, labels, dloss, 2); }).find("dx"),
            std::string::npos);
  labels.data<int32_t>()[1] = int32_t(V);
  EXPECT_NE(message([&] { ops::lm_head_ce_fwd_bwd(ex, loss, dx, dw, x, w, labels, dloss, 2); }).find("label"),
            std::string::npos);
}

// Runs forward + backward of the module `make` builds, with immediate or delayed wgrad; returns
// (every parameter gradient, dx) as one concatenated copy, and checks the queue length.
template <class Make>
std::pair<Tensor, Tensor> grads_with(Make make, bool delay, size_t expected_tasks, int64_t C) {
  ParamStore s;
  auto m = make(s);
  s.finalize(DType::F32, Device::CPU);
  init_params(s, test::test_seed(60));
  for (Param* p : s.all())  // biases and norms off their 0/1 init so every gradient is generic
    if (p->init != InitKind::Normal) ops::axpy(Exec::cpu(), p->value, test::random_uniform(p->shape, DType::F32, 61), 0.2);
  Tensor x = test::random_uniform({2, 5, C}, DType::F32, 62), dy = test::random_uniform({2, 5, C}, DType::F32, 63);
  StepContext ctx(Exec::cpu());
  ctx.delay_wgrad = delay;
  m->forward(ctx, x);
  Tensor dx = m->backward(ctx, dy);
  EXPECT_EQ(ctx.pending_wgrad(), delay ? expected_tasks : 0u);
  m->backward_dw(ctx);
  EXPECT_EQ(ctx.pending_wgrad(), 0u);
  return {s.flat_grads().clone(), dx.clone()};
}

TEST(SelfAttention, DelayedWgradIsBitwiseIdentical) {
  AttentionOptions o;
  o.hidden = 16;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 4;
  o.qk_norm = true;
  o.bias = true;
  auto make = [&](ParamStore& s) { return std::make_unique<SelfAttention>(o, "decoder.layers.0.", s); };
  auto [g0, dx0] = grads_with(make, false, 2, 16);
  auto [g1, dx1] = grads_with(make, true, 2, 16);  // linear_qkv and linear_proj
  EXPECT_TRUE(test::bitwise_equal(g0, g1));
  EXPECT_TRUE(test::bitwise_equal(dx0, dx1));
}

TEST(Mlp, DelayedWgradIsBitwiseIdentical) {
  MlpOptions o;
  o.hidden = 16;
  o.ffn = 24;
  o.activation = Activation::SwiGLU;
  o.bias = true;
  auto make = [&](ParamStore& s) { return std::make_unique<Mlp>(o, "decoder.layers.1.", s); };
  auto [g0, dx0] = grads_with(make, false, 2, 16);
  auto [g1, dx1] = grads_with(make, true, 2, 16);  // linear_fc1 and linear_fc2
  EXPECT_TRUE(test::bitwise_equal(g0, g1));
  EXPECT_TRUE(test::bitwise_equal(dx0, dx1));
}

TEST(Linear, DelayedWgradIsBitwiseIdentical) {
  Tensor x = test::random_uniform({3, 5, 16}, DType::F32, 1), dy = test::random_uniform({3, 5, 24}, DType::F32, 2);
  Tensor grads[2];
  for (int delay = 0; delay < 2; ++delay) {
    ParamStore s;
    Linear lin("l.", 16, 24, true, 0.1, s);
    s.finalize(DType::F32, Device::CPU);
    init_params(s, 3);
    StepContext ctx(Exec::cpu());
    ctx.delay_wgrad = delay == 1;
    lin.forward(ctx, x);
    lin.backward(ctx, dy);
    if (delay) {
      EXPECT_EQ(ctx.pending_wgrad(), 1u);
      for (double g : s.flat_grads().to_f64_vector()) EXPECT_EQ(g, 0.0);  // nothing yet
      lin.backward_dw(ctx);
    }
    grads[delay] = s.flat_grads().clone();
  }
  EXPECT_TRUE(test::bitwise_equal(grads[0], grads[1]));
}

// zero_grad(lazy): the Linears' first wgrad GEMM overwrites their stale gradient (beta 0), later
// ones accumulate, other parameters are zeroed as before, and finish_grads() zeroes what no write
// reached. Over old non-zero gradients, the result is bitwise that of an eager zero_grad.
TEST(ParamStore, LazyZeroGradEqualsEagerZeroGrad) {
  Tensor x = test::random_uniform({3, 5, 16}, DType::F32, 4), dy = test::random_uniform({3, 5, 16}, DType::F32, 5);
  Tensor grads[2];
  for (int lazy = 0; lazy < 2; ++lazy) {
    ParamStore s;
    Linear used("used.", 16, 16, true, 0.1, s);
    Param& scale = s.create("scale", {16}, InitKind::Ones, 0.0, true);  // not written by a GEMM
    Linear unused("unused.", 16, 8, true, 0.1, s);
    s.finalize(DType::F32, Device::CPU);
    init_params(s, 6);
    for (Param* p : s.all()) ops::fill(Exec::cpu(), p->grad, 7.0);  // a previous step's gradients
    s.zero_grad(lazy == 1);
    EXPECT_EQ(scale.grad.to_f64_vector()[0], 0.0);
    StepContext ctx(Exec::cpu());
    for (int pass = 0; pass < 2; ++pass) {  // two micro-batches: overwrite, then accumulate
      used.forward(ctx, x);
      used.backward(ctx, dy);
    }
    s.finish_grads();
    for (double g : unused.weight().grad.to_f64_vector()) EXPECT_EQ(g, 0.0);
    grads[lazy] = s.flat_grads().clone();
  }
  EXPECT_TRUE(test::bitwise_equal(grads[0], grads[1]));
}

TEST(Keys, MlpAndAttentionUseMegatronNames) {
  ParamStore s;
  MlpOptions mo;
  mo.hidden = 8;
  mo.ffn = 12;
  mo.activation = Activation::SwiGLU;
  Mlp mlp(mo, "decoder.layers.2.", s);
  EXPECT_EQ(names(s), (std::vector<std::string>{"decoder.layers.2.mlp.linear_fc1.layer_norm_weight [8]",
                                                "decoder.layers.2.mlp.linear_fc1.weight [24, 8]",
                                                "decoder.layers.2.mlp.linear_fc2.weight [8, 12]"}));
  ParamStore t;
  AttentionOptions ao;
  ao.hidden = 8;
  ao.num_heads = 4;
  ao.num_kv_heads = 2;
  ao.head_dim = 2;
  ao.qk_norm = true;
  ao.norm = NormKind::LayerNorm;
  ao.bias = true;
  SelfAttention attn(ao, "decoder.layers.0.", t);
  EXPECT_EQ(names(t), (std::vector<std::string>{
                          "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight [8]",
                          "decoder.layers.0.self_attention.linear_qkv.layer_norm_bias [8]",
                          "decoder.layers.0.self_attention.linear_qkv.weight [16, 8]",
                          "decoder.layers.0.self_attention.linear_qkv.bias [16]",
                          "decoder.layers.0.self_attention.q_layernorm.weight [2]",
                          "decoder.layers.0.self_attention.q_layernorm.bias [2]",
                          "decoder.layers.0.self_attention.k_layernorm.weight [2]",
                          "decoder.layers.0.self_attention.k_layernorm.bias [2]",
                          "decoder.layers.0.self_attention.linear_proj.weight [8, 8]",
                          "decoder.layers.0.self_attention.linear_proj.bias [8]"}));
}

// Naive causal GQA attention from the weight layout of docs/spec/names.md §1 (rows per KV group g:
// [H/Hkv query heads of g; k_g; v_g]), RMSNorm input, no RoPE, no biases, in double.
TEST(SelfAttention, QkvRowLayoutMatchesANaiveImplementation) {
  const int64_t B = 2, T = 4, C = 6, H = 4, G = 2, D = 3, R = H / G;
  AttentionOptions o;
  o.hidden = C;
  o.num_heads = H;
  o.num_kv_heads = G;
  o.head_dim = D;
  o.use_rope = false;
  o.init_std = o.output_init_std = 0.5;
  ParamStore s;
  SelfAttention attn(o, "p.", s);
  s.finalize(DType::F64, Device::CPU);
  init_params(s, 4);
  Tensor x = test::random_uniform({B, T, C}, DType::F64, 5);
  StepContext ctx(Exec::cpu());
  Tensor y = attn.forward(ctx, x);

  auto W = s.find("p.self_attention.linear_qkv.weight")->value.to_f64_vector();
  auto P = s.find("p.self_attention.linear_proj.weight")->value.to_f64_vector();
  auto xs = x.to_f64_vector();
  std::vector<double> want(size_t(B * T * C), 0.0);
  auto row_of = [&](int64_t g, int64_t slot, int64_t d) { return (g * (R + 2) + slot) * D + d; };
  for (int64_t b = 0; b < B; ++b) {
    // RMSNorm (weight 1, eps 1e-5) then the projections, per position.
    std::vector<double> q(size_t(T * H * D)), k(size_t(T * G * D)), v(size_t(T * G * D));
    for (int64_t t = 0; t < T; ++t) {
      const double* xr = &xs[size_t((b * T + t) * C)];
      double ms = 0;
      for (int64_t c = 0; c < C; ++c) ms += xr[c] * xr[c] / double(C);
      const double rstd = 1.0 / std::sqrt(ms + 1e-5);
      auto proj = [&](int64_t row) {
        double acc = 0;
        for (int64_t c = 0; c < C; ++c) acc += W[size_t(row * C + c)] * xr[c] * rstd;
        return acc;
      };
      for (int64_t g = 0; g < G; ++g)
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t j = 0; j < R; ++j) q[size_t((t * H + g * R + j) * D + d)] = proj(row_of(g, j, d));
          k[size_t((t * G + g) * D + d)] = proj(row_of(g, R, d));
          v[size_t((t * G + g) * D + d)] = proj(row_of(g, R + 1, d));
        }
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> out(size_t(H * D), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / R;
        std::vector<double> sc(size_t(t + 1));
        double mx = -1e300, den = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double dotp = 0;
          for (int64_t d = 0; d < D; ++d) dotp += q[size_t((t * H + h) * D + d)] * k[size_t((u * G + g) * D + d)];
          sc[size_t(u)] = dotp / std::sqrt(double(D));
          mx = std::max(mx, sc[size_t(u)]);
        }
        for (auto& e : sc) den += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t d = 0; d < D; ++d)
            out[size_t(h * D + d)] += sc[size_t(u)] / den * v[size_t((u * G + g) * D + d)];
      }
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < H * D; ++j) want[size_t((b * T + t) * C + c)] += P[size_t(c * H * D + j)] * out[size_t(j)];
    }
  }
  Tensor w = Tensor::empty({B, T, C}, DType::F64);
  w.copy_from_f64(want);
  EXPECT_TRUE(test::all_close(y, w, test::tol_for(DType::F64)));
}

// Hand-built weights (docs/spec/names.md §1 row groups per KV group g: [R query heads; k_g; v_g]) so every
// output has a closed form. C = H*D = 8, RMSNorm with eps 0 on +-1 inputs is the identity,
// linear_proj is the identity, no RoPE. Inputs: x_0 = (1,1,...,1), x_1 = (1,-1,1,-1,...).
//   q_h = (alpha_h, 0) from channel 0;  k_g = (+-beta_g, 0) from channel 1;
//   v_g[d] = gamma_gd +- delta_gd (channels 0 and 1).
// Position 0 attends to itself only: y = gamma + delta. Position 1 weighs scores +-s with
// s = alpha_h beta_g / sqrt(D): y = gamma + delta * tanh(s). A head reading another group's k/v,
// or q/k/v taken from the wrong rows, changes the numbers.
TEST(SelfAttention, QkvRowGroupingByHand) {
  const int64_t H = 4, G = 2, D = 2, C = H * D, R = H / G;
  AttentionOptions o;
  o.hidden = C;
  o.num_heads = H;
  o.num_kv_heads = G;
  o.head_dim = D;
  o.use_rope = false;
  o.norm_eps = 0.0;
  ParamStore s;
  SelfAttention attn(o, "p.", s);
  s.finalize(DType::F64, Device::CPU);
  init_params(s, 1);
  const double alpha[H] = {0.5, 1.0, 1.5, 2.0}, beta[G] = {0.8, -1.2};
  auto gamma = [](int64_t g, int64_t d) { return double(1 + 2 * g + d); };
  auto delta = [](int64_t g, int64_t d) { return 0.25 * double(1 + 2 * g + d); };
  std::vector<double> W(size_t((H + 2 * G) * D * C), 0.0);
  auto at = [&](int64_t g, int64_t slot, int64_t d, int64_t c) -> double& {
    return W[size_t(((g * (R + 2) + slot) * D + d) * C + c)];
  };
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t j = 0; j < R; ++j) at(g, j, 0, 0) = alpha[g * R + j];
    at(g, R, 0, 1) = beta[g];
    for (int64_t d = 0; d < D; ++d) {
      at(g, R + 1, d, 0) = gamma(g, d);
      at(g, R + 1, d, 1) = delta(g, d);
    }
  }
  s.find("p.self_attention.linear_qkv.weight")->value.copy_from_f64(W);
  std::vector<double> eye(size_t(C * C), 0.0);
  for (int64_t c = 0; c < C; ++c) eye[size_t(c * C + c)] = 1.0;
  s.find("p.self_attention.linear_proj.weight")->value.copy_from_f64(eye);
  std::vector<double> xs(size_t(2 * C));
  for (int64_t c = 0; c < C; ++c) {
    xs[size_t(c)] = 1.0;
    xs[size_t(C + c)] = c % 2 == 0 ? 1.0 : -1.0;
  }
  StepContext ctx(Exec::cpu());
  Tensor y = attn.forward(ctx, f64({1, 2, C}, xs));

  std::vector<double> want(size_t(2 * C));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / R;
    const double sc = alpha[h] * beta[g] / std::sqrt(double(D));
    for (int64_t d = 0; d < D; ++d) {
      want[size_t(h * D + d)] = gamma(g, d) + delta(g, d);
      want[size_t(C + h * D + d)] = gamma(g, d) + delta(g, d) * std::tanh(sc);
    }
  }
  EXPECT_TRUE(test::all_close(y, f64({1, 2, C}, want), test::tol_for(DType::F64)));
}

TEST(SelfAttention, RejectsBadHeadCountsAndOddRotaryDim) {
  AttentionOptions o;
  o.hidden = 8;
  o.num_heads = 3;
  o.num_kv_heads = 2;
  o.head_dim = 4;
  ParamStore s1;
  EXPECT_THROW(SelfAttention(o, "a.", s1), Error);
  o.num_heads = 4;
  o.head_dim = 6;
  o.rotary_percent = 0.5;  // int(6 * 0.5) = 3: odd
  ParamStore s2;
  EXPECT_THROW(SelfAttention(o, "b.", s2), Error);
}

}  // namespace
}  // namespace hytra
