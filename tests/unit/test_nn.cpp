// nn framework: flat parameter buffers, init reproducibility, delayed wgrad, canonical keys, and the
// attention QKV row layout against an independent naive implementation.
#include <gtest/gtest.h>

#include <cmath>

#include "common/compare.h"
#include "common/random.h"
#include "core/error.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "ops/ops.h"

namespace hytra {
namespace {

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
  s.flat_values().data<float>()[7] = 3.5f;  // element 1 of b
  EXPECT_EQ(b.value.data<float>()[1], 3.5f);
  a.grad.data<float>()[0] = 1.0f;
  EXPECT_EQ(s.flat_grads().data<float>()[0], 1.0f);
  s.zero_grad();
  EXPECT_EQ(a.grad.data<float>()[0], 0.0f);
  EXPECT_EQ(s.find("b.bias"), &b);
  EXPECT_EQ(s.find("c"), nullptr);
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

// Naive causal GQA attention from the weight layout of SPEC.md A2.1 (rows per KV group g:
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

}  // namespace
}  // namespace hytra
