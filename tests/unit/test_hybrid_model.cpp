// The model from a pattern: canonical keys per logical layer, final-norm naming, tied/untied head,
// "not built yet" symbols, and SPEC A2.5's numerics rule (a group is only a naming/scheduling
// boundary: `[*-]` computes exactly what `*-` computes with the same weights).
#include <gtest/gtest.h>

#include <cmath>

#include "common/compare.h"
#include "common/random.h"
#include "core/error.h"
#include "model/hybrid_model.h"
#include "ops/ops.h"

namespace hytra {
namespace {

ModelConfig tiny(const std::string& pattern) {
  ModelConfig c;
  c.hybrid_layer_pattern = pattern;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.normalization = "RMSNorm";
  c.activation = "swiglu";
  c.position_embedding_type = "rope";
  c.add_bias_linear = false;
  c.vocab_size = 30;
  c.make_vocab_size_divisible_by = 16;
  c.seq_length = 6;
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
  EXPECT_EQ(keys(m), (std::vector<std::string>{
                         "embedding.word_embeddings.weight",
                         "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                         "decoder.layers.0.self_attention.linear_qkv.weight",
                         "decoder.layers.0.self_attention.linear_proj.weight",
                         "decoder.layers.0.mlp.linear_fc1.layer_norm_weight",
                         "decoder.layers.0.mlp.linear_fc1.weight",
                         "decoder.layers.0.mlp.linear_fc2.weight",
                         "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight",
                         "decoder.layers.1.self_attention.linear_qkv.weight",
                         "decoder.layers.1.self_attention.linear_proj.weight",
                         "decoder.layers.2.mlp.linear_fc1.layer_norm_weight",
                         "decoder.layers.2.mlp.linear_fc1.weight",
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
  EXPECT_EQ(m.layer_counts().attention, 1);
  EXPECT_EQ(m.layer_counts().mlp, 1);
}

TEST(HybridModel, GptStackWithoutPattern) {
  ModelConfig c = tiny("");
  c.num_layers = 2;
  LayerPlan p = plan_for(c);
  EXPECT_EQ(p.main, "[*-][*-]");
  EXPECT_EQ(p.num_layers, 4);
}

TEST(HybridModel, UnbuiltSymbolsAreNamedErrors) {
  for (const char* pattern : {"M*", "*E", "G-", "/**"}) {
    ModelConfig c = tiny(pattern);
    std::string msg;
    try {
      HybridModel m(c, plan_for(c));
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("not built yet"), std::string::npos) << pattern << ": " << msg;
  }
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

}  // namespace
}  // namespace hytra
