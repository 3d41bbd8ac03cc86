// hytra generate (tools/cli/generate.h): the model fed one token at a time through its decode caches gives the
// logits of the whole-sequence forward at every position (each layer kind, RoPE variants, GQA, QK-norm, MoE, mHC;
// fp64 on the CPU, fp32 and bf16 on a GPU); the sampler's rules; the command end to end from a trained checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/generate.h"
#include "cli/sampling.h"
#include "core/device.h"
#include "model/hybrid_model.h"
#include "nn/param.h"

namespace hytra {
namespace {

ModelConfig small(const std::string& pattern) {
  ModelConfig c;
  c.hybrid_layer_pattern = pattern;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 24;
  c.normalization = NormKind::RMSNorm;
  c.activation = Activation::SwiGLU;
  c.position_embedding_type = PositionEmbedding::Rope;
  c.add_bias_linear = false;
  c.vocab_size = 40;
  c.make_vocab_size_divisible_by = 16;
  c.seq_length = 16;
  c.mamba_head_dim = 8;  // 4 heads
  c.mamba_num_groups = 2;
  c.mamba_state_dim = 8;
  c.mamba_chunk_size = 4;
  c.linear_num_key_heads = 2;
  c.linear_num_value_heads = 4;
  c.linear_key_head_dim = 8;
  c.linear_value_head_dim = 6;
  c.num_experts = 4;
  c.moe_router_topk = 2;
  c.moe_ffn_hidden_size = 8;
  c.moe_shared_expert_intermediate_size = 8;
  return c;
}

// Largest |a - b| over the rows, relative to the largest |b|.
double worst_relative(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double diff = 0, scale = 0;
  for (size_t r = 0; r < b.size(); ++r)
    for (size_t i = 0; i < b[r].size(); ++i) {
      const double d = std::abs(a[r][i] - b[r][i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      scale = std::max(scale, std::abs(b[r][i]));
    }
  return diff / scale;
}

// Per position, the logits (vocab) of the whole-sequence forward and of the decoder, for `T` random tokens.
void both_ways(ModelConfig c, DType dtype, Device dev, int64_t T, std::vector<std::vector<double>>& full,
               std::vector<std::vector<double>>& stepped) {
  c.validate();
  HybridModel model(c, plan_for(c));
  model.params().finalize(dtype, dev);
  init_params(model.params(), 7);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = int32_t((t * 17 + 5) % c.vocab_size);
  Tensor batch = Tensor::empty({1, T}, DType::I32);
  std::copy(ids.begin(), ids.end(), batch.data<int32_t>());
  Exec& ex = Exec::for_device(dev);
  StepContext ctx(ex);
  ctx.grad_enabled = false;
  const Tensor logits = model.logits(ctx, batch.to(dev));  // (1, T, padded)
  const int64_t Vp = logits.size(2);
  const std::vector<double> all = logits.to_f64_vector();
  full.clear();
  stepped.clear();
  for (int64_t t = 0; t < T; ++t) full.emplace_back(all.begin() + t * Vp, all.begin() + t * Vp + c.vocab_size);
  Decoder decoder(model, ex, c.vocab_size, T);
  for (int32_t id : ids) stepped.push_back(decoder.step(id));
  EXPECT_EQ(decoder.position(), T);
  EXPECT_THROW(decoder.step(0), Error);  // past the capacity
}

struct Variant {
  const char* name;
  std::string pattern;
  void (*tweak)(ModelConfig&);
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"every layer kind", "M*-G-E*", [](ModelConfig&) {}},
      {"QK-norm, interleaved half RoPE", "*-M*",
       [](ModelConfig& c) {
         c.qk_layernorm = true;
         c.rotary_interleaved = true;
         c.rotary_percent = 0.5;
       }},
      {"no position embedding, MHA, LayerNorm", "*M-",
       [](ModelConfig& c) {
         c.position_embedding_type = PositionEmbedding::None;
         c.group_query_attention = false;
         c.normalization = NormKind::LayerNorm;
       }},
      {"mHC, 2 streams", "M*E",
       [](ModelConfig& c) {
         c.enable_mhc = true;
         c.mhc_num_residual_streams = 2;
       }},
      {"a [*-] group and an MTP part (unused)", "[*-]M/*-", [](ModelConfig&) {}},
      {"multi-latent attention with YaRN", "+-M+",
       [](ModelConfig& c) {
         c.rotary_scaling_factor = 40;
         c.mscale = 1;
         c.mscale_all_dim = 1;
         c.q_lora_rank = 8;
         c.kv_lora_rank = 6;
         c.qk_head_dim = 4;
         c.qk_pos_emb_head_dim = 4;
         c.v_head_dim = 6;
         c.qk_layernorm = true;
       }},
      {"multi-latent attention, plain RoPE, no query latent", "+E",
       [](ModelConfig& c) {
         c.kv_lora_rank = 6;
         c.qk_head_dim = 4;
         c.qk_pos_emb_head_dim = 2;
         c.v_head_dim = 6;
       }},
      {"learned absolute positions", "*-G",
       [](ModelConfig& c) {
         c.position_embedding_type = PositionEmbedding::LearnedAbsolute;
         c.max_position_embeddings = 80;
       }},
  };
  return v;
}

TEST(Generate, DecodingEqualsTheWholeSequenceForwardOnTheCpu) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    ModelConfig c = small(v.pattern);
    v.tweak(c);
    std::vector<std::vector<double>> full, stepped;
    both_ways(c, DType::F64, Device::CPU, 11, full, stepped);  // T = 11: past two SSD chunks of 4, not a multiple
    const double worst = worst_relative(stepped, full);
    EXPECT_LT(worst, 1e-12);
    std::printf("%s: worst relative logit difference %.3g\n", v.name, worst);
  }
}

TEST(GenerateCuda, DecodingEqualsTheWholeSequenceForwardOnTheGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    ModelConfig c = small(v.pattern);
    v.tweak(c);
    for (DType dt : {DType::F32, DType::BF16}) {
      std::vector<std::vector<double>> full, stepped;
      both_ways(c, dt, Device::CUDA, 70, full, stepped);  // several 64-token SSD/GDN chunks on CUDA
      const double worst = worst_relative(stepped, full);
      std::printf("%s, %s: worst relative logit difference %.3g\n", v.name, dtype_name(dt), worst);
      EXPECT_LT(worst, dt == DType::F32 ? 1e-4 : 3e-2);
    }
  }
}

TEST(Generate, SamplerRules) {
  const std::vector<double> logits = {0.5, 2.0, 2.0, -1.0, 1.0};
  EXPECT_EQ(TokenSampler({0.0, 0, 1.0}, 1).next(logits), 1);  // greedy: the lower id of the tie
  EXPECT_EQ(TokenSampler({1.0, 1, 1.0}, 1).next(logits), 1);  // top-k 1 is greedy
  EXPECT_THROW(TokenSampler({-1.0, 0, 1.0}, 1), Error);
  EXPECT_THROW(TokenSampler({1.0, -2, 1.0}, 1), Error);
  EXPECT_THROW(TokenSampler({1.0, 0, 0.0}, 1), Error);
  // top-k 2 draws only ids 1 and 2, about equally; top-p 0.3 keeps only the first of them (its mass is ~0.37).
  std::map<int32_t, int> seen;
  TokenSampler k2({1.0, 2, 1.0}, 5), p3({1.0, 0, 0.3}, 5);
  for (int i = 0; i < 2000; ++i) {
    ++seen[k2.next(logits)];
    EXPECT_EQ(p3.next(logits), 1);
  }
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[1], 1000, 120);
  EXPECT_NEAR(seen[2], 1000, 120);
  // Full sampling follows the softmax: id 4's share is e^1 / (e^0.5 + 2e^2 + e^-1 + e) ~ 0.134.
  TokenSampler all({1.0, 0, 1.0}, 9);
  int fours = 0;
  for (int i = 0; i < 20000; ++i) fours += all.next(logits) == 4;
  const double z = std::exp(0.5) + 2 * std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_NEAR(fours / 20000.0, std::exp(1.0) / z, 0.01);
  // The same seed, the same draws.
  TokenSampler a({0.7, 0, 0.9}, 42), b({0.7, 0, 0.9}, 42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(logits), b.next(logits));
}

}  // namespace
}  // namespace hytra
