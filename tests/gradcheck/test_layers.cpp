// A finite-difference gradient check (fp64, CPU) for every layer: analytic input and parameter
// gradients against central differences of L = sum(f(x) * r).
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "common/random.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/gated_delta_net.h"
#include "nn/hyper_connection.h"
#include "nn/linear.h"
#include "nn/lm_head.h"
#include "nn/mamba2.h"
#include "nn/mla.h"
#include "nn/mlp.h"
#include "nn/moe/moe_layer.h"
#include "nn/mtp.h"
#include "nn/norm.h"
#include "ops/ops.h"

namespace hytra {
namespace {

using test::gradcheck;
using test::GradcheckOptions;

constexpr int64_t B = 2, T = 5;

// Finalizes in fp64 and draws parameters of a useful size: weights N(0, std) from init, then
// norms and biases shifted off their 1/0 init so their gradients are exercised at generic points.
void prepare(ParamStore& store, uint64_t seed) {
  store.finalize(DType::F64, Device::CPU);
  init_params(store, test::test_seed(seed));
  uint64_t k = 0;
  for (Param* p : store.all()) {
    ++k;  // distinct noise per tensor, so swapped gradients of same-shaped tensors (q/k norms) fail
    if (p->init == InitKind::Normal) continue;
    Tensor noise = test::random_uniform(p->shape, DType::F64, seed * 1000 + k, -0.3, 0.3);
    ops::axpy(Exec::cpu(), p->value, noise, 1.0);
  }
}

Tensor input(int64_t C, uint64_t seed) { return test::random_uniform({B, T, C}, DType::F64, seed, -1.0, 1.0); }

TEST(Gradcheck, Linear) {
  for (bool bias : {false, true}) {
    for (bool delay : {false, true}) {
      ParamStore store;
      Linear lin("p.linear.", 6, 7, bias, 0.5, store);
      prepare(store, 1);
      GradcheckOptions opt;
      opt.delay_wgrad = delay;
      SCOPED_TRACE(testing::Message() << "bias " << bias << " delay " << delay);
      gradcheck(store, input(6, 2), lin, opt);
    }
  }
}

TEST(Gradcheck, Norms) {
  for (NormKind kind : {NormKind::RMSNorm, NormKind::LayerNorm}) {
    ParamStore store;
    Norm norm(NormOptions{kind, 8, 1e-5}, "decoder.final_norm.", store);
    prepare(store, 3);
    SCOPED_TRACE(kind == NormKind::RMSNorm ? "RMSNorm" : "LayerNorm");
    gradcheck(store, input(8, 4), norm);
  }
}

TEST(Gradcheck, Embedding) {
  ParamStore store;
  Embedding emb("embedding.word_embeddings.weight", 11, 6, 0.5, store);
  prepare(store, 5);
  Tensor ids = test::random_ids({B, T}, 11, 6);  // repeated ids exercise the accumulation
  gradcheck(store, ids, emb);
}

struct AttentionCase {
  int64_t heads, kv_heads;
  bool qk_norm, bias, rope, interleaved;
  double rotary_percent;
  NormKind norm;
  bool delay_wgrad;
};

void check_attention(const AttentionCase& c, uint64_t seed) {
  AttentionOptions o;
  o.hidden = 8;
  o.num_heads = c.heads;
  o.num_kv_heads = c.kv_heads;
  o.head_dim = 4;
  o.qk_norm = c.qk_norm;
  o.bias = c.bias;
  o.norm = c.norm;
  o.use_rope = c.rope;
  o.rotary_interleaved = c.interleaved;
  o.rotary_percent = c.rotary_percent;
  o.init_std = 0.5;
  o.output_init_std = 0.5;
  ParamStore store;
  SelfAttention attn(o, "decoder.layers.0.", store);
  prepare(store, seed);
  SCOPED_TRACE(testing::Message() << "heads " << c.heads << "/" << c.kv_heads << " qk_norm " << c.qk_norm << " bias "
                                  << c.bias << " rope " << c.rope << " interleaved " << c.interleaved << " rotary "
                                  << c.rotary_percent << " layernorm " << (c.norm == NormKind::LayerNorm)
                                  << " delay_wgrad " << c.delay_wgrad);
  GradcheckOptions opt;
  opt.delay_wgrad = c.delay_wgrad;
  gradcheck(store, input(8, seed + 1), attn, opt);
}

// MHA, GQA 4:2 and 4:1, each with and without q/k norm and biases (RoPE on, full rotary).
TEST(Gradcheck, SelfAttentionHeadLayouts) {
  uint64_t seed = 10;
  for (int64_t kv : {4, 2, 1})
    for (bool qk_norm : {false, true})
      for (bool bias : {false, true}) {
        const NormKind norm = bias ? NormKind::LayerNorm : NormKind::RMSNorm;
        check_attention({4, kv, qk_norm, bias, true, false, 1.0, norm, false}, seed);
        seed += 2;
      }
}

TEST(Gradcheck, SelfAttentionRotaryVariants) {
  const AttentionCase cases[] = {
      {4, 2, false, false, true, false, 0.5, NormKind::RMSNorm, false},   // partial rotary
      {4, 2, false, false, true, true, 1.0, NormKind::RMSNorm, false},    // interleaved pairs
      {4, 1, true, false, true, true, 0.5, NormKind::LayerNorm, false},   // both, with qk norm
      {2, 1, false, true, false, false, 1.0, NormKind::LayerNorm, false}, // no RoPE
      {4, 2, true, true, true, false, 1.0, NormKind::RMSNorm, true},      // delayed wgrad
  };
  uint64_t seed = 40;
  for (const auto& c : cases) {
    check_attention(c, seed);
    seed += 2;
  }
}

// Multi-latent attention: with the query latent and both latent norms; a plain query projection without norms, a
// value head narrower than the query/key head, LayerNorm and a linear_proj bias; YaRN with delayed weight gradients.
TEST(Gradcheck, MultiLatentAttention) {
  struct Case {
    int64_t q_lora_rank, v_head_dim;
    bool latent_norms, bias, delay_wgrad;
    NormKind norm;
  };
  const Case cases[] = {{6, 4, true, false, false, NormKind::RMSNorm},
                        {0, 3, false, true, false, NormKind::LayerNorm},
                        {5, 6, true, false, true, NormKind::RMSNorm}};
  uint64_t seed = 60;
  for (const Case& c : cases) {
    MlaOptions o;
    o.hidden = 8;
    o.num_heads = 3;
    o.q_lora_rank = c.q_lora_rank;
    o.kv_lora_rank = 5;
    o.qk_head_dim = 4;
    o.qk_pos_emb_head_dim = 2;
    o.v_head_dim = c.v_head_dim;
    o.latent_norms = c.latent_norms;
    o.bias = c.bias;
    o.norm = c.norm;
    o.init_std = 0.5;
    o.output_init_std = 0.5;
    if (c.delay_wgrad) o.yarn = yarn_rope(2, 10000.0, 4096.0, 40.0, 1.0, 0.5);  // YaRN's frequencies and scale
    ParamStore store;
    MultiLatentAttention mla(o, "decoder.layers.0.", store);
    prepare(store, seed);
    SCOPED_TRACE(testing::Message() << "q_lora_rank " << c.q_lora_rank << " v_head_dim " << c.v_head_dim);
    GradcheckOptions opt;
    opt.delay_wgrad = c.delay_wgrad;
    gradcheck(store, input(8, seed + 1), mla, opt);
    seed += 2;
  }
}

TEST(Gradcheck, Mlp) {
  uint64_t seed = 60;
  for (Activation act : {Activation::SwiGLU, Activation::GeLU, Activation::SquaredReLU}) {
    for (bool bias : {false, true}) {
      MlpOptions o;
      o.hidden = 6;
      o.ffn = 10;
      o.activation = act;
      o.bias = bias;
      o.init_std = 0.5;
      o.output_init_std = 0.5;
      ParamStore store;
      Mlp mlp(o, "decoder.layers.1.", store);
      prepare(store, seed);
      // Delayed wgrad on the biased cases: the queued fc1/fc2 tasks must give the same gradients.
      GradcheckOptions opt;
      opt.delay_wgrad = bias;
      SCOPED_TRACE(testing::Message() << "activation " << int(act) << " bias " << bias);
      // Squared ReLU's second derivative jumps at 0: a pre-activation within 2h of 0 puts stencil
      // points across the kink and costs ~h |jump| in the quotient (seen: relative error 1e-5 at
      // the default h = 1e-4, one seed in ~30). With h = 1e-5 that is ~1e-6 relative and ten times
      // rarer, so the tolerance is relaxed to 1e-5; a wrong gradient is still off by O(1).
      if (act == Activation::SquaredReLU) {
        opt.step = 1e-5;
        opt.rel_tol = 1e-5;
      }
      gradcheck(store, input(6, seed + 1), mlp, opt);
      seed += 2;
    }
  }
}

// Mamba-2 mixer (T = 5 with chunk 2: a partial last chunk), one and two B/C groups, LayerNorm and
// RMSNorm pre-norms, immediate and delayed wgrad.
TEST(Gradcheck, Mamba2Mixer) {
  uint64_t seed = 90;
  for (int64_t groups : {1, 2}) {
    for (bool delay : {false, true}) {
      Mamba2Options o;
      o.hidden = 6;
      o.num_heads = 4;
      o.head_dim = 2;
      o.state_dim = 3;
      o.num_groups = groups;
      o.chunk_size = 2;
      o.norm = delay ? NormKind::LayerNorm : NormKind::RMSNorm;
      o.init_std = 0.5;
      o.output_init_std = 0.5;
      ParamStore store;
      Mamba2Mixer mixer(o, "decoder.layers.2.", store);
      prepare(store, seed);
      GradcheckOptions opt;
      opt.delay_wgrad = delay;
      SCOPED_TRACE(testing::Message() << "groups " << groups << " delay " << delay);
      gradcheck(store, input(6, seed + 1), mixer, opt);
      seed += 2;
    }
  }
}

// Gated delta net: value heads equal to and twice the key heads, dk != dv, chunk 2 over T = 5,
// with and without linear biases (delayed wgrad on the biased case).
TEST(Gradcheck, GatedDeltaNet) {
  uint64_t seed = 110;
  for (int64_t key_heads : {2, 1}) {
    for (bool bias : {false, true}) {
      GatedDeltaNetOptions o;
      o.hidden = 6;
      o.key_heads = key_heads;
      o.value_heads = 2;
      o.key_head_dim = 3;
      o.value_head_dim = 2;
      o.chunk_size = 2;
      o.bias = bias;
      o.init_std = 0.5;
      o.output_init_std = 0.5;
      ParamStore store;
      GatedDeltaNet gdn(o, "decoder.layers.3.", store);
      prepare(store, seed);
      GradcheckOptions opt;
      opt.delay_wgrad = bias;
      SCOPED_TRACE(testing::Message() << "key heads " << key_heads << " bias " << bias);
      gradcheck(store, input(6, seed + 1), gdn, opt);
      seed += 2;
    }
  }
}

// MoE layer (router, dispatch, grouped experts, shared experts) over T*B = 10 tokens, 4 experts:
// the routing choice is piecewise constant, so the checks sit at points where no finite-difference
// step flips a choice (the fixed seeds give well-separated scores).
struct MoeCase {
  const char* name;
  ops::RouterScore score;
  bool pre_softmax, expert_bias;
  int64_t topk, groups, group_topk;
  ops::ExpertActivation act;
  int64_t interleave;
  double offset, clamp;
  bool bias;
  ExpertLayout layout;
  double capacity;  // < 0: dropless
  int64_t pad_multiple;
  int64_t shared;   // shared expert width (0: none)
  bool gate, delay;
};

void check_moe(const MoeCase& c, uint64_t seed) {
  MoeOptions o;
  o.hidden = 6;
  o.router.hidden = 6;
  o.router.num_experts = 4;
  o.router.topk = c.topk;
  o.router.score = c.score;
  o.router.pre_softmax = c.pre_softmax;
  o.router.expert_bias = c.expert_bias;
  o.router.num_groups = c.groups;
  o.router.group_topk = c.group_topk;
  o.router.scaling = 1.5;
  o.router.init_std = 0.5;
  o.dispatch.num_experts = 4;
  o.dispatch.topk = c.topk;
  o.dispatch.capacity_factor = c.capacity;
  o.dispatch.pad_multiple = c.pad_multiple;
  o.experts.hidden = 6;
  o.experts.ffn = 4;
  o.experts.num_experts = 4;
  o.experts.activation = c.act;
  o.experts.glu_interleave = c.interleave;
  o.experts.linear_offset = c.offset;
  o.experts.clamp = c.clamp;
  o.experts.bias = c.bias;
  o.router.bias = c.bias;
  o.experts.weight_layout = o.experts.bias_layout = c.layout;
  o.experts.init_std = o.experts.output_init_std = 0.5;
  o.shared_ffn = c.shared;
  o.shared_gate = c.gate;
  o.shared_activation = c.act;
  ParamStore store;
  MoeLayer moe(o, "decoder.layers.4.", 5, store);
  prepare(store, seed);
  GradcheckOptions opt;
  opt.delay_wgrad = c.delay;
  SCOPED_TRACE(c.name);
  gradcheck(store, input(6, seed + 1), moe, opt);
}

TEST(Gradcheck, MoeRouterScoresAndGroups) {
  using S = ops::RouterScore;
  using A = ops::ExpertActivation;
  const MoeCase cases[] = {
      {"softmax top-2", S::Softmax, false, false, 2, 0, 0, A::SwiGLU, 0, 0, 0, false, ExpertLayout::Indexed, -1, 0, 0, false, false},
      {"pre-softmax top-1", S::Softmax, true, false, 1, 0, 0, A::SwiGLU, 0, 0, 0, false, ExpertLayout::Indexed, -1, 0, 0, false, false},
      {"softmax, groups 2 keep 1", S::Softmax, false, false, 2, 2, 1, A::SwiGLU, 0, 0, 0, false, ExpertLayout::Indexed, -1, 0, 0, false, false},
      {"sigmoid top-2", S::Sigmoid, false, false, 2, 0, 0, A::SwiGLU, 0, 0, 0, false, ExpertLayout::Indexed, -1, 0, 0, false, false},
      {"sigmoid + expert bias, groups", S::Sigmoid, false, true, 2, 2, 1, A::SwiGLU, 0, 0, 0, false, ExpertLayout::Grouped, -1, 0, 0, false, false},
  };
  uint64_t seed = 130;
  for (const auto& c : cases) {
    check_moe(c, seed);
    seed += 2;
  }
}

TEST(Gradcheck, MoeExpertsActivationsLayoutsAndShared) {
  using S = ops::RouterScore;
  using A = ops::ExpertActivation;
  const MoeCase cases[] = {
      {"gelu, biases, grouped", S::Softmax, false, false, 2, 0, 0, A::GeLU, 0, 0, 0, true, ExpertLayout::Grouped, -1, 0, 0, false, false},
      {"squared relu, biases", S::Softmax, false, false, 2, 0, 0, A::SquaredReLU, 0, 0, 0, true, ExpertLayout::Indexed, -1, 0, 0, false, true},
      {"swiglu interleave 2", S::Softmax, false, false, 2, 0, 0, A::SwiGLU, 2, 0, 0, false, ExpertLayout::Indexed, -1, 0, 0, false, false},
      {"quick-geglu interleave 1, clamp, offset", S::Sigmoid, false, false, 2, 0, 0, A::QuickGeGLU, 1, 1.0, 0.7, false, ExpertLayout::Indexed, -1, 0, 0, false, false},
      {"capacity 0.5 (drops), shared", S::Softmax, false, false, 2, 0, 0, A::SwiGLU, 0, 0, 0, false, ExpertLayout::Indexed, 0.5, 0, 3, false, false},
      {"padding 16, gated shared, delayed", S::Softmax, false, false, 2, 0, 0, A::SwiGLU, 0, 0, 0, true, ExpertLayout::Indexed, -1, 16, 3, true, true},
  };
  uint64_t seed = 150;
  for (const auto& c : cases) {
    check_moe(c, seed);
    seed += 2;
  }
}

// One MTP depth (docs/spec/mtp.md §1) with an attention + MLP inner block: gradients of its per-token losses
// reach the previous hidden state, its own norms and eh_proj, the inner layers and the shared
// embedding and output weights. Rolled labels mask the tail (-1).
TEST(Gradcheck, MtpDepth) {
  ParamStore store;
  Embedding emb("embedding.word_embeddings.weight", 13, 8, 0.5, store);
  OutputLayer head("output_layer.weight", 13, 8, 0.5, nullptr, store);
  auto build = [](ParamStore& s) {
    std::vector<std::unique_ptr<Module>> layers;
    AttentionOptions ao;
    ao.hidden = 8;
    ao.num_heads = 2;
    ao.num_kv_heads = 1;
    ao.head_dim = 4;
    ao.init_std = ao.output_init_std = 0.3;
    layers.push_back(std::make_unique<SelfAttention>(ao, "mtp.layers.0.mtp_model_layer.layers.0.", s));
    MlpOptions mo;
    mo.hidden = 8;
    mo.ffn = 12;
    mo.activation = Activation::SwiGLU;
    mo.init_std = mo.output_init_std = 0.3;
    layers.push_back(std::make_unique<Mlp>(mo, "mtp.layers.0.mtp_model_layer.layers.1.", s));
    return layers;
  };
  MtpDepth depth("mtp.layers.0.", NormOptions{NormKind::RMSNorm, 8, 1e-5}, 0.5, emb.weight(), head.weight(), build,
                 store);
  prepare(store, 170);
  Tensor ids = test::random_ids({B, T}, 13, 171), labels = test::random_ids({B, T}, 13, 172);
  labels.data<int32_t>()[T - 1] = -1;  // a rolled-in tail
  labels.data<int32_t>()[2 * T - 1] = -1;
  gradcheck(
      store, input(8, 173),
      [&](StepContext& ctx, const Tensor& h) {
        Tensor h_out;
        return depth.forward(ctx, h, ids, labels, h_out);
      },
      [&](StepContext& ctx, const Tensor& dl) { return depth.backward(ctx, dl, Tensor()); });
}

// mHC around an MLP (docs/spec/mhc.md §2-§3): through the aggregation, the combine, the coefficients and
// the unrolled Sinkhorn iterations, for n = 1, 2, 4 and both variants.
TEST(Gradcheck, HyperConnection) {
  uint64_t seed = 190;
  for (int64_t n : {1, 2, 4}) {
    for (auto variant : {ops::MhcVariant::Main, ops::MhcVariant::Dev}) {
      ParamStore store;
      MlpOptions mo;
      mo.hidden = 6;
      mo.ffn = 8;
      mo.activation = Activation::SwiGLU;
      mo.init_std = mo.output_init_std = 0.4;
      HyperConnectionOptions o;
      o.hidden = 6;
      o.streams = n;
      o.sinkhorn_iterations = 5;
      o.init_gating = 0.5;  // gates large enough that every mapping path carries gradient
      o.variant = variant;
      HyperConnection hc(o, "decoder.layers.0.mlp_hyper_connection.",
                         std::make_unique<Mlp>(mo, "decoder.layers.0.", store), store);
      prepare(store, seed);
      SCOPED_TRACE(testing::Message() << "n " << n << " dev " << (variant == ops::MhcVariant::Dev));
      gradcheck(store, test::random_uniform({B, T, n, 6}, DType::F64, seed + 1, -1.0, 1.0), hc);
      seed += 2;
    }
  }
}

TEST(Gradcheck, OutputLayerTiedAndUntied) {
  for (bool tied : {false, true}) {
    ParamStore store;
    Embedding emb("embedding.word_embeddings.weight", 13, 6, 0.5, store);
    OutputLayer head("output_layer.weight", 13, 6, 0.5, tied ? &emb.weight() : nullptr, store);
    prepare(store, 80);
    EXPECT_EQ(store.find("output_layer.weight") == nullptr, tied);
    Tensor labels = test::random_ids({B, T}, 13, 81);
    labels.data<int32_t>()[3] = -1;  // ignored targets contribute nothing
    labels.data<int32_t>()[7] = -1;
    SCOPED_TRACE(tied ? "tied" : "untied");
    gradcheck(
        store, input(6, 82), [&](StepContext& ctx, const Tensor& h) { return head.forward(ctx, h, labels); },
        [&](StepContext& ctx, const Tensor& dl) { return head.backward(ctx, dl); });
  }
}

// A two-layer toy model from the pieces: embedding -> h + attn(h) -> h + mlp(h) -> norm -> head.
TEST(Gradcheck, ComposedToyModel) {
  ParamStore store;
  Embedding emb("embedding.word_embeddings.weight", 17, 8, 0.5, store);
  AttentionOptions ao;
  ao.hidden = 8;
  ao.num_heads = 2;
  ao.num_kv_heads = 1;
  ao.head_dim = 4;
  ao.init_std = ao.output_init_std = 0.3;
  SelfAttention attn(ao, "decoder.layers.0.", store);
  MlpOptions mo;
  mo.hidden = 8;
  mo.ffn = 12;
  mo.activation = Activation::SwiGLU;
  mo.init_std = mo.output_init_std = 0.3;
  Mlp mlp(mo, "decoder.layers.0.", store);
  Norm final_norm(NormOptions{NormKind::RMSNorm, 8, 1e-5}, "decoder.final_layernorm.", store);
  OutputLayer head("output_layer.weight", 17, 8, 0.5, &emb.weight(), store);
  prepare(store, 50);
  Tensor ids = test::random_ids({B, T}, 17, 51), labels = test::random_ids({B, T}, 17, 52);
  Exec& ex = Exec::cpu();
  auto residual = [&](StepContext& ctx, Module& m, const Tensor& h) {
    Tensor f = m.forward(ctx, h), out = Tensor::empty(h.shape(), h.dtype());
    ops::add(ex, out, h, f);
    return out;
  };
  auto forward = [&](StepContext& ctx, const Tensor&) {
    Tensor h = emb.forward(ctx, ids);
    h = residual(ctx, attn, h);
    h = residual(ctx, mlp, h);
    return head.forward(ctx, final_norm.forward(ctx, h), labels);
  };
  auto backward = [&](StepContext& ctx, const Tensor& dloss) {
    Tensor dh = final_norm.backward(ctx, head.backward(ctx, dloss));
    ops::axpy(ex, dh, mlp.backward(ctx, dh), 1.0);
    ops::axpy(ex, dh, attn.backward(ctx, dh), 1.0);
    emb.backward(ctx, dh);
    return Tensor();
  };
  gradcheck(store, Tensor(), forward, backward);
}

}  // namespace
}  // namespace hytra
