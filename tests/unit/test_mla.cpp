// Multi-latent attention (nn/mla.h) against a direct transcription of Megatron's MLASelfAttention forward
// (docs/spec/mla.md §1): the RoPE channels de-interleaved and rotated as halves, heads [nope, rope], the shared key
// expanded, causal softmax with scale 1/sqrt(dn + dr). fp64 on the CPU, every output element compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/random.h"
#include "core/error.h"
#include "model/config.h"
#include "model/hybrid_model.h"
#include "model/layer_kinds.h"
#include "nn/mla.h"
#include "ops/ops.h"

namespace hytra {
namespace {

using Vec = std::vector<double>;

struct Weights {
  std::map<std::string, Vec> w;
  const Vec& operator[](const std::string& k) const {
    auto it = w.find("decoder.layers.0." + k);
    HYTRA_ASSERT(it != w.end(), "no parameter ", k);
    return it->second;
  }
};

// y (out) = W (out, in) x.
Vec linear(const Vec& W, const Vec& x, int64_t out) {
  const int64_t in = int64_t(x.size());
  Vec y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[size_t(o)] += W[size_t(o * in + i)] * x[size_t(i)];
  return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// RoPE frequencies: plain, or YaRN's blend of extra = base^(-2i/dr) and extra / factor over the ramp from pair low
// to pair high (docs/spec/mla.md §2), in fp32.
std::vector<float> frequencies(int64_t dr, double base, double factor, double low, double high) {
  std::vector<float> f;
  for (int64_t i = 0; i < dr / 2; ++i) {
    const float extra = 1.0f / std::pow(float(base), float(2 * i) / float(dr));
    const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    f.push_back(factor > 1 ? extra / float(factor) * ramp + extra * (1.0f - ramp) : extra);
  }
  return f;
}

// Megatron's MLA RoPE: de-interleave, then rotate halves at position t, cos and sin times `scale`.
Vec rope(const Vec& x, int64_t t, const std::vector<float>& inv_freq, double scale) {
  const size_t dr = x.size(), half = dr / 2;
  Vec y(dr), out(dr);
  for (size_t i = 0; i < half; ++i) {
    y[i] = x[2 * i];
    y[i + half] = x[2 * i + 1];
  }
  for (size_t i = 0; i < half; ++i) {
    const double a = double(float(t) * inv_freq[i]), c = scale * std::cos(a), s = scale * std::sin(a);
    out[i] = y[i] * c - y[i + half] * s;
    out[i + half] = y[i + half] * c + y[i] * s;
  }
  return out;
}

// softmax_scale: what the reference divides the scores by instead of 1/sqrt(dq) (0: that); inv_freq and rope_scale
// the reference's RoPE.
void check(const MlaOptions& o, uint64_t seed, const std::vector<float>& inv_freq, double rope_scale = 1.0,
           double softmax_scale = 0.0) {
  ParamStore store;
  MultiLatentAttention mla(o, "decoder.layers.0.", store);
  store.finalize(DType::F64, Device::CPU);
  init_params(store, seed);
  Weights W;
  uint64_t k = 0;
  for (Param* p : store.all()) {  // norms off their init of ones, so a misplaced norm weight shows
    if (p->init != InitKind::Normal) {
      Tensor noise = test::random_uniform(p->shape, DType::F64, seed * 100 + ++k, -0.3, 0.3);
      ops::axpy(Exec::cpu(), p->value, noise, 1.0);
    }
    W.w[p->name] = p->value.to_f64_vector();
  }
  const int64_t B = 2, T = 5, h = o.hidden, n = o.num_heads, dn = o.qk_head_dim, dr = o.qk_pos_emb_head_dim;
  const int64_t dv = o.v_head_dim, dq = dn + dr, rkv = o.kv_lora_rank;
  const Tensor x = test::random_uniform({B, T, h}, DType::F64, seed + 7);
  StepContext ctx(Exec::cpu());
  const std::vector<double> got = mla.forward(ctx, x).to_f64_vector();

  const Vec xs = x.to_f64_vector();
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Vec> Q(size_t(T * n)), K(size_t(T * n)), V(size_t(T * n));  // per (t, head)
    for (int64_t t = 0; t < T; ++t) {
      const Vec xt(xs.begin() + (b * T + t) * h, xs.begin() + (b * T + t + 1) * h);
      const Vec xn = rmsnorm(xt, W["input_layernorm.weight"], o.norm_eps);
      Vec q;
      if (o.q_lora_rank > 0) {
        Vec qc = linear(W["self_attention.linear_q_down_proj.weight"], xn, o.q_lora_rank);
        if (o.latent_norms) qc = rmsnorm(qc, W["self_attention.linear_q_up_proj.layer_norm_weight"], o.norm_eps);
        q = linear(W["self_attention.linear_q_up_proj.weight"], qc, n * dq);
      } else {
        q = linear(W["self_attention.linear_q_proj.weight"], xn, n * dq);
      }
      const Vec kv = linear(W["self_attention.linear_kv_down_proj.weight"], xn, rkv + dr);
      Vec kvc(kv.begin(), kv.begin() + rkv);
      const Vec k_pe = rope(Vec(kv.begin() + rkv, kv.end()), t, inv_freq, rope_scale);
      if (o.latent_norms) kvc = rmsnorm(kvc, W["self_attention.linear_kv_up_proj.layer_norm_weight"], o.norm_eps);
      const Vec kvu = linear(W["self_attention.linear_kv_up_proj.weight"], kvc, n * (dn + dv));
      for (int64_t j = 0; j < n; ++j) {
        const auto qh = q.cbegin() + j * dq;
        const auto kvh = kvu.cbegin() + j * (dn + dv);
        Vec qq(qh, qh + dn), kk(kvh, kvh + dn);
        const Vec q_pe = rope(Vec(qh + dn, qh + dq), t, inv_freq, rope_scale);
        qq.insert(qq.end(), q_pe.begin(), q_pe.end());
        kk.insert(kk.end(), k_pe.begin(), k_pe.end());
        Q[size_t(t * n + j)] = qq;
        K[size_t(t * n + j)] = kk;
        V[size_t(t * n + j)] = Vec(kvh + dn, kvh + dn + dv);
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec core;  // (n dv)
      for (int64_t j = 0; j < n; ++j) {
        Vec s(static_cast<size_t>(t + 1));
        double m = -INFINITY, l = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t c = 0; c < dq; ++c) d += Q[size_t(t * n + j)][size_t(c)] * K[size_t(u * n + j)][size_t(c)];
          s[size_t(u)] = d * (softmax_scale > 0 ? softmax_scale : 1.0 / std::sqrt(double(dq)));
          m = std::max(m, s[size_t(u)]);
        }
        Vec out(static_cast<size_t>(dv), 0.0);
        for (int64_t u = 0; u <= t; ++u) {
          const double p = std::exp(s[size_t(u)] - m);
          l += p;
          for (int64_t c = 0; c < dv; ++c) out[size_t(c)] += p * V[size_t(u * n + j)][size_t(c)];
        }
        for (double& v : out) core.push_back(v / l);
      }
      Vec y = linear(W["self_attention.linear_proj.weight"], core, h);
      if (o.bias)
        for (int64_t c = 0; c < h; ++c) y[size_t(c)] += W["self_attention.linear_proj.bias"][size_t(c)];
      for (int64_t c = 0; c < h; ++c)
        EXPECT_NEAR(got[size_t((b * T + t) * h + c)], y[size_t(c)], 1e-12) << "b " << b << " t " << t << " c " << c;
    }
  }
}

MlaOptions options() {
  MlaOptions o;
  o.hidden = 12;
  o.num_heads = 3;
  o.q_lora_rank = 6;
  o.kv_lora_rank = 5;
  o.qk_head_dim = 4;
  o.qk_pos_emb_head_dim = 4;
  o.v_head_dim = 3;
  o.latent_norms = true;
  o.norm = NormKind::RMSNorm;
  o.norm_eps = 1e-6;
  o.rotary_base = 100.0;
  o.init_std = 0.4;
  o.output_init_std = 0.4;
  return o;
}

TEST(Mla, MatchesMegatronsFormulation) {
  const MlaOptions o = options();
  check(o, 3, frequencies(4, o.rotary_base, 1, 0, 1));
  MlaOptions plain = options();  // a plain query projection, no latent norms, a value head as wide as dq, a bias
  plain.q_lora_rank = 0;
  plain.latent_norms = false;
  plain.v_head_dim = 8;
  plain.bias = true;
  check(plain, 5, frequencies(4, o.rotary_base, 1, 0, 1));
}

// YaRN (docs/spec/mla.md §2) at factor 40 over dr = 8 with base 10^4 and the original context 4096: the pairs that
// turn 32 times over it start the ramp, those that turn once end it: corr(32) = 8 ln(4096 / 64 pi) / 2 ln 10^4 =
// 1.31 and corr(1) = 2.81, so pairs 0-1 keep their frequency, pair 2 blends half, pair 3 is divided by 40. cos and sin
// scale by mscale(40, 0.8) / mscale(40, 0.6); the softmax by mscale(40, 0.6)^2 / sqrt(dq).
TEST(Mla, YarnMatchesMegatronsFormulation) {
  const YarnRope y = yarn_rope(8, 1e4, 4096, 40, 0.8, 0.6);
  EXPECT_EQ(y.low, 1.0);
  EXPECT_EQ(y.high, 3.0);
  EXPECT_DOUBLE_EQ(y.scale, (0.08 * std::log(40.0) + 1) / (0.06 * std::log(40.0) + 1));
  EXPECT_EQ(yarn_mscale(1.0, 0.6), 1.0);
  EXPECT_EQ(yarn_rope(8, 1e4, 4096, 1.0, 1, 1).factor, 1.0);  // no extension: plain RoPE
  MlaOptions o = options();
  o.qk_pos_emb_head_dim = 8;
  o.rotary_base = 1e4;
  o.yarn = y;
  const double m = yarn_mscale(40, 0.6);
  o.softmax_scale = m * m / std::sqrt(double(o.qk_head_dim + 8));
  check(o, 9, frequencies(8, 1e4, 40, 1, 3), y.scale, o.softmax_scale);
}

// The GPT stack with --multi-latent-attention: `[+-]` layers with Megatron's MLA keys; the configuration's errors.
TEST(Mla, GptStackKeysAndConfigErrors) {
  ModelConfig c;
  c.num_layers = 2;
  c.multi_latent_attention = true;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.q_lora_rank = 8;
  c.kv_lora_rank = 6;
  c.qk_head_dim = 4;
  c.qk_pos_emb_head_dim = 2;
  c.v_head_dim = 4;
  c.qk_layernorm = true;
  c.normalization = NormKind::RMSNorm;
  c.add_bias_linear = false;
  c.vocab_size = 32;
  c.seq_length = 8;
  c.position_embedding_type = PositionEmbedding::Rope;
  c.validate();
  const LayerPlan plan = plan_for(c);
  EXPECT_EQ(plan.main, "[+-][+-]");
  HybridModel m(c, plan);
  std::vector<std::string> keys;
  for (const Param* p : m.params().all())
    if (p->name.rfind("decoder.layers.1.", 0) == 0) keys.push_back(p->name.substr(17));
  const std::vector<std::string> want = {"input_layernorm.weight",
                                         "self_attention.linear_q_down_proj.weight",
                                         "self_attention.linear_q_up_proj.layer_norm_weight",
                                         "self_attention.linear_q_up_proj.weight",
                                         "self_attention.linear_kv_down_proj.weight",
                                         "self_attention.linear_kv_up_proj.layer_norm_weight",
                                         "self_attention.linear_kv_up_proj.weight",
                                         "self_attention.linear_proj.weight",
                                         "mlp.linear_fc1.layer_norm_weight",
                                         "mlp.linear_fc1.weight",
                                         "mlp.linear_fc2.weight"};
  EXPECT_EQ(keys, want);
  auto error_of = [&](auto edit) {
    ModelConfig bad = c;
    edit(bad);
    try {
      bad.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of([](ModelConfig& b) { b.qk_pos_emb_head_dim = 3; })
                .find("--qk-pos-emb-head-dim: RoPE rotates "
                      "pairs"),
            std::string::npos);
  EXPECT_NE(error_of([](ModelConfig& b) { b.v_head_dim = 7; }).find("--v-head-dim"), std::string::npos);
  EXPECT_NE(error_of([](ModelConfig& b) { b.rotary_scaling_factor = -1; }).find("--rotary-scaling-factor: expected"),
            std::string::npos);
  EXPECT_NE(error_of([](ModelConfig& b) { b.rotary_interleaved = true; }).find("--rotary-interleaved"),
            std::string::npos);
  EXPECT_NE(error_of([](ModelConfig& b) { b.kv_lora_rank = 0; }).find("--kv-lora-rank"), std::string::npos);
}

}  // namespace
}  // namespace hytra
