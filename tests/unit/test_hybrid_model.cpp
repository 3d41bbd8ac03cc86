// The model from a pattern: canonical keys per logical layer, final-norm naming, tied/untied head,
// "not built yet" symbols, and the numerics rule of docs/spec/names.md §5 (a group is only a naming/scheduling
// boundary: `[*-]` computes exactly what `*-` computes with the same weights).
#include <gtest/gtest.h>

#include <cmath>

#include "common/compare.h"
#include "common/random.h"
#include "core/allocator.h"
#include "core/error.h"
#include "model/hybrid_model.h"
#include "model/model_plan.h"
#include "model/recompute_plan.h"
#include "ops/ops.h"

namespace hytra {
namespace {

// A small model of `pattern`, not yet validated (tests that change a field first).
ModelConfig tiny_unvalidated(const std::string& pattern) {
  ModelConfig c;
  c.hybrid_layer_pattern = pattern;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.normalization = NormKind::RMSNorm;
  c.activation = Activation::SwiGLU;
  c.position_embedding_type = PositionEmbedding::Rope;
  c.add_bias_linear = false;
  c.vocab_size = 30;
  c.make_vocab_size_divisible_by = 16;
  c.seq_length = 6;
  c.mamba_head_dim = 4;  // H = 2 * 8 / 4 = 4 heads
  c.mamba_num_groups = 2;
  c.mamba_state_dim = 4;
  c.mamba_chunk_size = 4;  // T = 6: one full and one partial chunk
  c.linear_num_key_heads = 1;
  c.linear_num_value_heads = 2;
  c.linear_key_head_dim = 4;
  c.linear_value_head_dim = 3;
  return c;
}

ModelConfig tiny(const std::string& pattern) {
  ModelConfig c = tiny_unvalidated(pattern);
  c.validate();
  return c;
}

std::vector<std::string> keys(HybridModel& m) {
  std::vector<std::string> out;
  for (const Param* p : m.params().all()) out.push_back(p->name);
  return out;
}

TEST(HybridModel, GroupedLayersShareOneLogicalIndex) {
  ModelConfig c = tiny("[*-]*-");
  HybridModel m(c, plan_for(c));
  EXPECT_EQ(
      keys(m),
      (std::vector<std::string>{
          "embedding.word_embeddings.weight", "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
          "decoder.layers.0.self_attention.linear_qkv.weight", "decoder.layers.0.self_attention.linear_proj.weight",
          "decoder.layers.0.mlp.linear_fc1.layer_norm_weight", "decoder.layers.0.mlp.linear_fc1.weight",
          "decoder.layers.0.mlp.linear_fc2.weight", "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight",
          "decoder.layers.1.self_attention.linear_qkv.weight", "decoder.layers.1.self_attention.linear_proj.weight",
          "decoder.layers.2.mlp.linear_fc1.layer_norm_weight", "decoder.layers.2.mlp.linear_fc1.weight",
          "decoder.layers.2.mlp.linear_fc2.weight",
          "decoder.final_layernorm.weight",  // the main pattern has '['
      }));
  EXPECT_EQ(m.params().find("embedding.word_embeddings.weight")->shape, (Shape{32, 8}));  // padded vocab
}

TEST(HybridModel, UngroupedPatternUsesFinalNormAndUntiedHead) {
  ModelConfig c = tiny("*-");
  c.untie_embeddings_and_output_weights = true;
  HybridModel m(c, plan_for(c));
  auto k = keys(m);
  EXPECT_EQ(k[k.size() - 2], "decoder.final_norm.weight");
  EXPECT_EQ(k.back(), "output_layer.weight");
  EXPECT_EQ(m.layer_counts().of('*'), 1);
  EXPECT_EQ(m.layer_counts().of('-'), 1);
}

TEST(HybridModel, GptStackWithoutPattern) {
  ModelConfig c = tiny_unvalidated("");
  c.num_layers = 2;
  c.validate();
  LayerPlan p = plan_for(c);
  EXPECT_EQ(p.main, "[*-][*-]");
  EXPECT_EQ(p.num_layers, 4);
  // The hybrid ratios given, even as 0, ask for Megatron's hybrid allocator instead: every layer Mamba.
  c.num_layers = 4;
  c.hybrid_attention_ratio = 0.0;
  c.hybrid_mlp_ratio = 0.0;
  EXPECT_EQ(plan_for(c).main, "MMMM");
}

// Megatron's GPTModel with --num-experts: every layer's MLP is MoE unless --moe-layer-freq picks them; the MTP depth's
// inner layer is like the last layer.
TEST(HybridModel, GptStackWithExpertsAndMoeLayerFreq) {
  ModelConfig c = tiny_unvalidated("");
  c.num_layers = 3;
  c.num_experts = 4;
  c.moe_ffn_hidden_size = 8;
  c.validate();
  EXPECT_EQ(plan_for(c).main, "[*E][*E][*E]");
  c.moe_layer_freq = "([0]*1+[1]*2)";
  c.mtp_num_layers = 1;
  const LayerPlan p = plan_for(c);
  EXPECT_EQ(p.main, "[*-][*E][*E]");
  EXPECT_EQ(p.mtp, "*E");
  c.moe_layer_freq = "2";
  EXPECT_EQ(plan_for(c).main, "[*E][*-][*E]");
  c.hybrid_layer_pattern = "*E*-";
  EXPECT_THROW(plan_for(c), Error);  // --moe-layer-freq is for GPT stacks only
}

TEST(HybridModel, MoeLayerFreqFormsAndErrors) {
  EXPECT_EQ(moe_layers_of("", 2), (std::vector<bool>{true, true}));
  EXPECT_EQ(moe_layers_of("3", 5), (std::vector<bool>{true, false, false, true, false}));
  EXPECT_EQ(moe_layers_of("[1,0,1]", 3), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(moe_layers_of("([0]*3+[1]*2)", 5), (std::vector<bool>{false, false, false, true, true}));
  EXPECT_EQ(moe_layers_of("[0, 1]*2 + [1]", 5), (std::vector<bool>{false, true, false, true, true}));
  for (const char* bad : {"0", "[1,0]", "[2]*5", "([1]*4", "[1]*4-[0]", "abc", "[1]*999999999"}) {
    try {
      moe_layers_of(bad, 5);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--moe-layer-freq"), std::string::npos) << e.what();
    }
  }
}

// The output projections' init std is Megatron's std / sqrt(2 x layers), a GPT stack's `[*-]` counting once:
// 0.02 / sqrt(2 x 2) = 0.01 for two layers (not / sqrt(2 x 4)).
TEST(HybridModel, GptStackOutputInitCountsTransformerLayers) {
  ModelConfig c = tiny_unvalidated("");
  c.num_layers = 2;
  c.hidden_size = 128;
  c.ffn_hidden_size = 192;
  c.num_attention_heads = 4;
  c.validate();
  HybridModel m(c, plan_for(c));
  m.params().finalize(DType::F32, Device::CPU);
  init_params(m.params(), 3);
  for (const char* key :
       {"decoder.layers.0.self_attention.linear_proj.weight", "decoder.layers.1.mlp.linear_fc2.weight"}) {
    const std::vector<double> w = m.params().find(key)->value.to_f64_vector();
    double sq = 0;
    for (double x : w) sq += x * x;
    EXPECT_NEAR(std::sqrt(sq / double(w.size())), 0.01, 0.0006) << key;  // (16,384 or 24,576 draws: ~0.5% noise)
  }
}

TEST(HybridModel, UnbuiltSymbolsAreNamedErrors) {
  for (const char* pattern : {"D-", "MD", "-/D"}) {
    ModelConfig c = tiny_unvalidated(pattern);
    std::string msg;
    try {
      c.validate();
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("not built yet"), std::string::npos) << pattern << ": " << msg;
  }
}

// docs/spec/names.md §2: Mamba-2 and gated delta net keys and shapes, Megatron's order within a layer.
TEST(HybridModel, MambaAndGatedDeltaNetKeys) {
  ModelConfig c = tiny("MG");
  HybridModel m(c, plan_for(c));
  // Mamba: d_inner 16, H 4, G*N 8; GDN: q/k 1*4, v/z 2*3, beta/alpha 2.
  const std::vector<std::pair<std::string, Shape>> want = {
      {"embedding.word_embeddings.weight", {32, 8}},
      {"decoder.layers.0.mixer.in_proj.layer_norm_weight", {8}},
      {"decoder.layers.0.mixer.in_proj.weight", {2 * 16 + 2 * 8 + 4, 8}},
      {"decoder.layers.0.mixer.conv1d.weight", {16 + 2 * 8, 1, 4}},
      {"decoder.layers.0.mixer.conv1d.bias", {16 + 2 * 8}},
      {"decoder.layers.0.mixer.A_log", {4}},
      {"decoder.layers.0.mixer.D", {4}},
      {"decoder.layers.0.mixer.dt_bias", {4}},
      {"decoder.layers.0.mixer.norm.weight", {16}},
      {"decoder.layers.0.mixer.out_proj.weight", {8, 16}},
      {"decoder.layers.1.self_attention.in_proj.layer_norm_weight", {8}},
      {"decoder.layers.1.self_attention.in_proj.weight", {2 * 4 + 2 * 6 + 2 * 2, 8}},
      {"decoder.layers.1.self_attention.conv1d.weight", {2 * 4 + 6, 1, 4}},
      {"decoder.layers.1.self_attention.conv1d.bias", {2 * 4 + 6}},
      {"decoder.layers.1.self_attention.A_log", {2}},
      {"decoder.layers.1.self_attention.dt_bias", {2}},
      {"decoder.layers.1.self_attention.out_norm.weight", {3}},
      {"decoder.layers.1.self_attention.out_proj.weight", {8, 6}},
      {"decoder.final_norm.weight", {8}},
  };
  ASSERT_EQ(m.params().all().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(m.params().all()[i]->name, want[i].first);
    EXPECT_EQ(m.params().all()[i]->shape, want[i].second) << want[i].first;
  }
  EXPECT_EQ(m.layer_counts().of('M'), 1);
  EXPECT_EQ(m.layer_counts().of('G'), 1);
}

// Model FLOPs per token (src/model/flops.h): the MTP depth's inner layers, eh_proj and extra LM head
// are counted (as Megatron's hybrid_flops), and the SSD / delta-rule terms are Megatron's.
TEST(HybridModel, FlopsCountMtpMambaAndGdnAsMegatron) {
  ModelConfig c = tiny("MG*-/*-");
  HybridModel m(c, plan_for(c));
  const LayerCounts k = m.layer_counts();
  EXPECT_EQ(k.of('*'), 2);
  EXPECT_EQ(k.of('-'), 2);
  EXPECT_EQ(k.of('M'), 1);
  EXPECT_EQ(k.of('G'), 1);
  EXPECT_EQ(k.mtp_depths, 1);
  const double C = 8, V = 32, T = 6, H = 2, D = 4, F = 12;
  const double attn = C * (H + 2 * H) * D + H * D * C, mlp = 3 * C * F;  // MHA (1 KV group each); SwiGLU
  const double mamba = C * (2 * 16 + 2 * 8 + 4) + 16 * C;                // d_inner 16, G*N 8, H 4
  const double gdn = C * (2 * 4 + 2 * 6 + 2 * 2) + 6 * C;                // qk 4, v 6, Hv 2
  const double params = 2 * attn + 2 * mlp + mamba + gdn + V * C + (2 * C * C + V * C);
  const double want = 6 * params + 6 * 2 * T * H * D + 3 * 7 * 16 * 4 + 3 * (8 * 2 * 3 * 4 + 2 * 4 * (2 * 4 + 6));
  EXPECT_DOUBLE_EQ(flops_per_token(c, k), want);
}

// Megatron's initialisation of the Mamba and GDN parameters (docs/spec/mamba_gdn.md): ranges, constants, and
// per-layer draws (the Philox stream is keyed by the parameter name).
TEST(HybridModel, MambaAndGatedDeltaNetInit) {
  ModelConfig c = tiny("MMG");
  HybridModel m(c, plan_for(c));
  m.params().finalize(DType::F32, Device::CPU);
  init_params(m.params(), 7);
  auto vals = [&](const std::string& k) { return m.params().find(k)->value.to_f64_vector(); };
  for (const char* layer : {"decoder.layers.0.mixer.", "decoder.layers.1.mixer."}) {
    const std::string p = layer;
    for (double a : vals(p + "A_log")) EXPECT_TRUE(a >= 0.0 && a <= std::log(16.0)) << a;
    for (double b : vals(p + "dt_bias")) {
      const double dt = std::log1p(std::exp(b));  // softplus(dt_bias) is the initial dt
      EXPECT_TRUE(dt >= 1e-3 * (1 - 1e-5) && dt <= 0.1 * (1 + 1e-5)) << dt;
    }
    for (double d : vals(p + "D")) EXPECT_EQ(d, 1.0);
    for (double w : vals(p + "norm.weight")) EXPECT_EQ(w, 1.0);
    for (const char* conv : {"conv1d.weight", "conv1d.bias"})
      for (double w : vals(p + conv)) EXPECT_TRUE(std::abs(w) <= 0.5) << conv << " " << w;  // 1/sqrt(d_conv)
  }
  EXPECT_NE(vals("decoder.layers.0.mixer.A_log"), vals("decoder.layers.1.mixer.A_log"));
  for (double b : vals("decoder.layers.2.self_attention.dt_bias")) EXPECT_EQ(b, 1.0);
  for (double a : vals("decoder.layers.2.self_attention.A_log")) EXPECT_TRUE(a >= 0.0 && a <= std::log(16.0));
  // out_proj: N(0, std / sqrt(2 L)) with L = 3 physical layers; in_proj N(0, std).
  auto stddev = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / double(v.size()));
  };
  EXPECT_NEAR(stddev(vals("decoder.layers.0.mixer.in_proj.weight")), 0.02, 0.003);
  EXPECT_NEAR(stddev(vals("decoder.layers.0.mixer.out_proj.weight")), 0.02 / std::sqrt(6.0), 0.0015);
}

// Forward and backward on fixed data with the given flat weights; returns (losses, flat gradients).
std::pair<Tensor, Tensor> run(const std::string& pattern, const Tensor& weights) {
  ModelConfig c = tiny(pattern);
  HybridModel m(c, plan_for(c));
  m.params().finalize(DType::F32, Device::CPU);
  ops::copy(Exec::cpu(), m.params().flat_values(), weights);
  Tensor ids = test::random_ids({2, 6}, 30, 12), labels = test::random_ids({2, 6}, 30, 13);
  StepContext ctx(Exec::cpu());
  Tensor loss = m.forward(ctx, ids, labels);
  Tensor dloss = Tensor::empty(loss.shape(), loss.dtype());
  dloss.copy_from(std::vector<float>(size_t(loss.numel()), 1.0f / float(loss.numel())));
  m.backward(ctx, dloss);
  return {loss.clone(), m.params().flat_grads().clone()};
}

TEST(HybridModel, GroupEqualsUngroupedBitwise) {
  // `[*-]` keys both sub-layers as decoder.layers.0, `*-` as layers 0 and 1; the parameters are
  // created in the same order with the same shapes, so one flat weight buffer serves both.
  ModelConfig c = tiny("*-");
  HybridModel init(c, plan_for(c));
  init.params().finalize(DType::F32, Device::CPU);
  init_params(init.params(), 11);
  auto [loss_g, grad_g] = run("[*-]", init.params().flat_values());
  auto [loss_u, grad_u] = run("*-", init.params().flat_values());
  EXPECT_TRUE(test::bitwise_equal(loss_g, loss_u));
  EXPECT_TRUE(test::bitwise_equal(grad_g, grad_u));
  // And the losses are real numbers near ln(V) for a fresh model.
  for (double l : loss_g.to_f64_vector()) EXPECT_NEAR(l, std::log(32.0), 1.0);
}

// MTP (docs/spec/mtp.md): with two depths the gradient of J = mean main CE + (factor / D) * sum_k (mean CE of
// depth k, labels rolled k times) matches central differences of J, in fp64, on elements of every
// parameter (the depths' own, the shared embedding and head, the main stack). J's MTP part comes
// from the logged per-depth losses of the same forward.
TEST(HybridModel, MtpGradientMatchesTheObjective) {
  ModelConfig c = tiny("*-/*-/*-");
  c.untie_embeddings_and_output_weights = true;
  c.mtp_loss_scaling_factor = 0.3;
  HybridModel m(c, plan_for(c));
  EXPECT_EQ(m.plan().mtp_depths, 2);
  m.params().finalize(DType::F64, Device::CPU);
  init_params(m.params(), 31);
  for (Param* p : m.params().all())  // weights large enough that every path matters
    if (p->init == InitKind::Normal) ops::scale(Exec::cpu(), p->value, 10.0);
  Tensor ids = test::random_ids({2, 6}, 30, 32), labels = test::random_ids({2, 6}, 30, 33);
  labels.data<int32_t>()[4] = -1;
  int64_t targets = 0;
  for (int64_t i = 0; i < 12; ++i) targets += labels.data<int32_t>()[i] >= 0;
  auto objective = [&]() {
    StepContext ctx(Exec::cpu());
    Tensor loss = m.forward(ctx, ids, labels);
    double main = 0;
    for (double l : loss.to_f64_vector()) main += l;
    double mtp = 0;
    for (double l : m.mtp_losses()) mtp += l;
    m.finish_step();
    return main / double(targets) + 0.3 / 2.0 * mtp;
  };
  {
    StepContext ctx(Exec::cpu());
    Tensor loss = m.forward(ctx, ids, labels);
    Tensor dloss = Tensor::empty(loss.shape(), DType::F64);
    std::vector<double> d(12);
    for (int64_t i = 0; i < 12; ++i) d[size_t(i)] = labels.data<int32_t>()[i] >= 0 ? 1.0 / double(targets) : 0.0;
    dloss.copy_from_f64(d);
    m.backward(ctx, dloss);
    m.finish_step();
  }
  int checked = 0;
  for (Param* p : m.params().all()) {
    const std::vector<double> g = p->grad.to_f64_vector();
    std::vector<double> v = p->value.to_f64_vector();
    for (size_t i : {size_t(0), v.size() / 2, v.size() - 1}) {
      const double keep = v[i], h = 1e-6;
      v[i] = keep + h;
      p->value.copy_from_f64(v);
      const double up = objective();
      v[i] = keep - h;
      p->value.copy_from_f64(v);
      const double down = objective();
      v[i] = keep;
      p->value.copy_from_f64(v);
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << p->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_NE(m.params().find("mtp.layers.1.mtp_model_layer.layers.1.mlp.linear_fc2.weight"), nullptr);
  EXPECT_NE(m.params().find("mtp.layers.0.eh_proj.weight"), nullptr);
  EXPECT_EQ(m.params().find("mtp.layers.0.eh_proj.weight")->shape, (Shape{8, 16}));
}

// Activation recompute lowers the bytes a micro-batch's forward leaves saved for backward (CPU
// allocator, in use after forward minus before): full/uniform keeps only each unit's input, selective
// drops the checkpointed bodies' state. The figures are printed for bench/NOTES.md.
// Bytes one forward leaves allocated for backward (CPU allocator in use after minus before), for a
// 32-wide model on B 4 x T 64 tokens; backward then runs to completion.
int64_t saved_after_forward(ModelConfig c) {
  c.hidden_size = 32;
  c.seq_length = 64;
  c.mamba_head_dim = 16;
  c.mamba_chunk_size = 16;
  c.validate();
  HybridModel m(c, plan_for(c));
  m.params().finalize(DType::F32, Device::CPU);
  init_params(m.params(), 41);
  Tensor ids = test::random_ids({4, 64}, 30, 42), labels = test::random_ids({4, 64}, 30, 43);
  StepContext ctx(Exec::cpu());
  const int64_t before = allocator_for(Device::CPU).stats().in_use;
  Tensor loss = m.forward(ctx, ids, labels);
  const int64_t saved = allocator_for(Device::CPU).stats().in_use - before;
  m.backward(ctx, Tensor::zeros(loss.shape(), loss.dtype()));
  return saved;
}

std::vector<RecomputeModule> recompute_modules(const std::vector<std::string>& names) {
  std::vector<RecomputeModule> out;
  for (const std::string& n : names) out.push_back(enum_of<RecomputeModule>(n, "--recompute-modules"));
  return out;
}

TEST(HybridModel, RecomputeLowersSavedActivationBytes) {
  auto saved_bytes = [](const std::string& granularity, const std::string& method, int64_t layers,
                        const std::vector<std::string>& modules) {
    ModelConfig c = tiny_unvalidated("M[*-]E-M-");
    c.ffn_hidden_size = 128;
    c.num_experts = 4;
    c.moe_ffn_hidden_size = 64;
    c.recompute_granularity =
        granularity.empty() ? RecomputeGranularity::None : enum_of<RecomputeGranularity>(granularity, "granularity");
    c.recompute_method = method.empty() ? RecomputeMethod::None : enum_of<RecomputeMethod>(method, "method");
    c.recompute_num_layers = layers;
    c.recompute_modules = recompute_modules(modules);
    c.validate();
    return saved_after_forward(c);
  };
  const int64_t none = saved_bytes("", "", 0, {});
  const int64_t uniform1 = saved_bytes("full", "uniform", 1, {});
  const int64_t uniform2 = saved_bytes("full", "uniform", 2, {});
  const int64_t block2 = saved_bytes("full", "block", 2, {});
  const int64_t selective = saved_bytes("selective", "", 0, {"mlp", "moe", "mamba"});
  const int64_t parts = saved_bytes("selective", "", 0, {"core_attn", "moe_act"});
  const int64_t norm = saved_bytes("selective", "", 0, {"layernorm"});
  std::printf(
      "saved activation bytes after forward: none %lld, full/uniform/1 %lld, full/uniform/2 %lld, "
      "full/block/2 %lld, selective mlp+moe+mamba %lld, selective core_attn+moe_act %lld, "
      "selective layernorm %lld\n",
      (long long)none, (long long)uniform1, (long long)uniform2, (long long)block2, (long long)selective,
      (long long)parts, (long long)norm);
  EXPECT_LT(uniform1, none / 3);  // 6 logical layers: only their inputs remain
  EXPECT_LE(uniform2, uniform1);  // fewer unit inputs
  EXPECT_LT(block2, none);        // the first two logical layers dropped
  EXPECT_GT(block2, uniform1);
  EXPECT_LT(selective, none);
  EXPECT_LT(parts, none);                   // the attention lse and the expert activations
  EXPECT_EQ(none - norm, 4 * 64 * 32 * 4);  // exactly the MoE layer's pre_mlp_layernorm output (B,T,C) fp32
}

// Selective "mhc" (docs/spec/mhc.md §6): inside each recompute block only the block's input streams stay saved.
TEST(HybridModel, MhcRecomputeLowersSavedActivationBytes) {
  auto saved_bytes = [](const std::vector<std::string>& modules, int64_t block) {
    ModelConfig c = tiny_unvalidated("M*-M*-");
    c.enable_mhc = true;
    c.mhc_num_residual_streams = 4;
    if (!modules.empty()) c.recompute_granularity = RecomputeGranularity::Selective;
    c.recompute_modules = recompute_modules(modules);
    c.mhc_recompute_layer_num = block;
    c.validate();
    return saved_after_forward(c);
  };
  const int64_t none = saved_bytes({}, 0), dflt = saved_bytes({"mhc"}, 0), six = saved_bytes({"mhc"}, 6);
  std::printf(
      "mHC saved activation bytes after forward: none %lld, mhc (default block: floor(sqrt(4*6/6)) = 2) "
      "%lld, mhc block 6 %lld\n",
      (long long)none, (long long)dflt, (long long)six);
  EXPECT_LT(dflt, none);
  EXPECT_LT(six, dflt);  // one block: only the stack's input streams stay
}

// Selective "mhc" blocks count logical layers, as Megatron counts transformer layers: a [M*] group is one layer of two
// sub-layers, and the default block size comes from the logical layer count (docs/spec/mhc.md §6).
TEST(HybridModel, MhcRecomputeBlocksCountLogicalLayers) {
  auto starts = [](const std::string& pattern, int64_t block) {
    ModelConfig c = tiny_unvalidated(pattern);
    c.enable_mhc = true;
    c.mhc_num_residual_streams = 4;
    c.recompute_granularity = RecomputeGranularity::Selective;
    c.recompute_modules = recompute_modules({"mhc"});
    c.mhc_recompute_layer_num = block;
    c.validate();
    const LayerPlan plan = plan_for(c);
    size_t sublayers = 0;
    for (const LayerItem& item : plan.items) sublayers += item.symbols.size();
    const RecomputePlan r = plan_recompute(c, plan, sublayers);
    std::vector<size_t> out;
    for (size_t i = 0; i < r.mhc_block_start.size(); ++i)
      if (r.mhc_block_start[i]) out.push_back(i);
    return out;
  };
  using V = std::vector<size_t>;
  EXPECT_EQ(starts("[M*][-M][*-]", 2), (V{0, 4}));  // blocks of two groups: sub-layers 0-3, 4-5
  EXPECT_EQ(starts("M*-M*-", 2), (V{0, 2, 4}));
  EXPECT_EQ(starts("[M*][-M][*-]", 0), (V{0, 2, 4}));  // default: floor(sqrt(4 * 3 / 6)) = 1 layer
  EXPECT_EQ(starts("M*-M*-", 0), (V{0, 2, 4}));        // default: floor(sqrt(4 * 6 / 6)) = 2 layers
  EXPECT_EQ(starts("[M*][-M][*-]", 3), (V{0}));        // one block: the whole stack
}

// The same rule for groups holding a Mamba mixer and a gated delta net.
TEST(HybridModel, MambaAndGdnGroupsEqualUngroupedBitwise) {
  for (const char* pattern : {"M-G*", "G-M*"}) {
    ModelConfig c = tiny(pattern);
    HybridModel init(c, plan_for(c));
    init.params().finalize(DType::F32, Device::CPU);
    init_params(init.params(), 21);
    const std::string p = pattern;
    const std::string grouped = "[" + p.substr(0, 2) + "][" + p.substr(2, 2) + "]";
    auto [loss_g, grad_g] = run(grouped, init.params().flat_values());
    auto [loss_u, grad_u] = run(p, init.params().flat_values());
    EXPECT_TRUE(test::bitwise_equal(loss_g, loss_u)) << pattern;
    EXPECT_TRUE(test::bitwise_equal(grad_g, grad_u)) << pattern;
    for (double l : loss_g.to_f64_vector()) EXPECT_NEAR(l, std::log(32.0), 1.0);
  }
}

}  // namespace
}  // namespace hytra
