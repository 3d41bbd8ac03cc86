// ModelConfig: everything that determines the model's shape and numerics. Each field names its
// Megatron-LM flag and default (docs/spec/megatron_cli.md §6); validate() collects every violation as
// "--flag: expected X, got Y" and throws them together. After validation the config is const.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/enum_text.h"

namespace hytra {

struct ModelConfig {
  // --hybrid-layer-pattern (alias --hybrid-override-pattern): the layer string (docs/pattern.md).
  std::string hybrid_layer_pattern;
  // --hybrid-attention-ratio / --hybrid-mlp-ratio: generate a pattern from --num-layers (either given, even as 0:
  // Megatron's hybrid allocator; 0 and 0 make every layer Mamba). Neither and no pattern: a GPT stack.
  std::optional<double> hybrid_attention_ratio;
  std::optional<double> hybrid_mlp_ratio;
  int64_t num_layers = 0;                // --num-layers: physical layers (derived from the pattern)
  int64_t mtp_num_layers = 0;            // --mtp-num-layers: MTP depths (derived from '/' parts)
  // --decoder-first/last-pipeline-num-layers: the physical layers of the first / last pipeline stage of a
  // pattern without pipes (the others split the rest evenly); 0: unset.
  int64_t decoder_first_pipeline_num_layers = 0, decoder_last_pipeline_num_layers = 0;
  double mtp_loss_scaling_factor = 0.1;  // --mtp-loss-scaling-factor: weight of the mean MTP loss

  int64_t hidden_size = 0;                       // --hidden-size: model width C
  int64_t ffn_hidden_size = 0;                   // --ffn-hidden-size: 0 = 4C, or int(8C/3/64)*64 with --swiglu
  int64_t num_attention_heads = 0;               // --num-attention-heads: query heads H
  bool group_query_attention = false;            // --group-query-attention: use num_query_groups KV heads
  int64_t num_query_groups = 1;                  // --num-query-groups: KV heads (with --group-query-attention)
  int64_t kv_channels = 0;                       // --kv-channels: head dim D; 0 = C / H
  bool qk_layernorm = false;                     // --qk-layernorm: norm q and k over the head dim
  bool add_bias_linear = true;                   // cleared by --disable-bias-linear
  NormKind normalization = NormKind::LayerNorm;  // --normalization: LayerNorm | RMSNorm
  double norm_epsilon = 1e-5;                    // --norm-epsilon
  Activation activation = Activation::GeLU;      // --swiglu, --squared-relu, --quick-geglu; else GeLU
  PositionEmbedding position_embedding_type = PositionEmbedding::LearnedAbsolute;  // --position-embedding-type
  int64_t max_position_embeddings = 0;               // --max-position-embeddings: 0 = seq_length
  double rotary_base = 10000.0;                      // --rotary-base
  double rotary_percent = 1.0;                       // --rotary-percent
  bool rotary_interleaved = false;                   // --rotary-interleaved
  // Multi-latent attention (`+`, docs/spec/mla.md); Megatron's command-line defaults.
  bool multi_latent_attention = false;  // --multi-latent-attention: a GPT stack's attention is MLA (`[+-]` layers)
  int64_t q_lora_rank = 0;              // --q-lora-rank: rq (0 = None: a plain query projection)
  int64_t kv_lora_rank = 32;            // --kv-lora-rank: rkv
  int64_t qk_head_dim = 128;            // --qk-head-dim: dn, the query/key channels without RoPE
  int64_t qk_pos_emb_head_dim = 64;     // --qk-pos-emb-head-dim: dr, the RoPE channels (one key shared by the heads)
  int64_t v_head_dim = 128;             // --v-head-dim: dv
  double rotary_scaling_factor = 1.0;   // --rotary-scaling-factor: YaRN's context extension factor (<= 1: none)
  double mscale = 1.0;                  // --mscale (YaRN)
  double mscale_all_dim = 0.0;          // --mscale-all-dim (YaRN)
  std::string rope_type;                // --rope-type: rope | yarn (unset: yarn with MLA; the same at factor <= 1)
  bool untie_embeddings_and_output_weights = false;  // --untie-embeddings-and-output-weights
  double init_method_std = 0.02;                     // --init-method-std
  double hidden_dropout = 0.0;                       // --hidden-dropout: only 0 is implemented (Megatron default 0.1)
  double attention_dropout = 0.0;                    // --attention-dropout: only 0 is implemented
  int64_t vocab_size = 0;                            // --vocab-size: tokenizer vocabulary (before padding)
  int64_t make_vocab_size_divisible_by = 128;        // --make-vocab-size-divisible-by
  int64_t seq_length = 0;                            // --seq-length: training sequence length T

  // Mamba-2 mixer (`M`, docs/spec/mamba_gdn.md §1). d_conv 4, expand 2, conv bias, no linear bias (Megatron's).
  int64_t mamba_state_dim = 128;   // --mamba-state-dim: SSM state N
  int64_t mamba_head_dim = 64;     // --mamba-head-dim: P
  int64_t mamba_num_groups = 8;    // --mamba-num-groups: B/C groups G (H % G == 0)
  int64_t mamba_num_heads = 0;     // --mamba-num-heads: H; 0 = 2 * hidden / P
  int64_t mamba_chunk_size = 128;  // --mamba-chunk-size: SSD chunk length (Megatron's chunk_size)
  // Gated delta net (`G`, docs/spec/mamba_gdn.md §2). Chunk size 64 (Megatron's).
  int64_t linear_conv_kernel_dim = 4;   // --linear-conv-kernel-dim: causal conv width
  int64_t linear_key_head_dim = 128;    // --linear-key-head-dim: dk
  int64_t linear_value_head_dim = 128;  // --linear-value-head-dim: dv
  int64_t linear_num_key_heads = 16;    // --linear-num-key-heads: Hk
  int64_t linear_num_value_heads = 32;  // --linear-num-value-heads: Hv (a multiple of Hk)

  // Mixture-of-experts (`E`, docs/spec/moe.md). Experts use --swiglu / --squared-relu / --quick-geglu / GeLU.
  int64_t num_experts = 0;          // --num-experts: routed experts E (0 = None)
  // --moe-layer-freq (GPT stacks): which layers are MoE: N (every N-th, from the first) or a list of 0/1 per layer,
  // "[1,0,1]" or Megatron's "([0]*3+[1]*9)"; empty: every layer (Megatron's default 1).
  std::string moe_layer_freq;
  int64_t moe_ffn_hidden_size = 0;  // --moe-ffn-hidden-size: expert width; 0 = --ffn-hidden-size
  int64_t moe_router_topk = 2;      // --moe-router-topk: k
  RouterScore moe_router_score_function = RouterScore::Softmax;  // --moe-router-score-function
  bool moe_router_pre_softmax = false;                           // --moe-router-pre-softmax
  int64_t moe_router_num_groups = 0;            // --moe-router-num-groups: group-limited routing (0 = None)
  int64_t moe_router_group_topk = 0;            // --moe-router-group-topk
  double moe_router_topk_scaling_factor = 0.0;  // --moe-router-topk-scaling-factor (0 = None)
  RouterDtype moe_router_dtype =
      RouterDtype::Default;                    // --moe-router-dtype: fp32 | None (logits in the activation dtype)
  bool moe_router_enable_expert_bias = false;  // --moe-router-enable-expert-bias (sigmoid only)
  double moe_router_bias_update_rate = 1e-3;   // --moe-router-bias-update-rate
  LoadBalancing moe_router_load_balancing_type = LoadBalancing::AuxLoss;  // --moe-router-load-balancing-type
  double moe_aux_loss_coeff = 0.0;                                        // --moe-aux-loss-coeff
  double moe_z_loss_coeff = 0.0;                                          // --moe-z-loss-coeff (0 = None)
  std::optional<double> moe_expert_capacity_factor;      // --moe-expert-capacity-factor (None: dropless; else > 0)
  DropPolicy moe_token_drop_policy = DropPolicy::Probs;  // --moe-token-drop-policy: probs | position
  bool moe_pad_expert_input_to_capacity = false;         // --moe-pad-expert-input-to-capacity
  bool moe_router_padding_for_quantization = false;      // --moe-router-padding-for-quantization (multiple of 16)
  int64_t moe_shared_expert_intermediate_size = 0;       // --moe-shared-expert-intermediate-size (0 = None)
  bool moe_shared_expert_gate = false;       // --moe-shared-expert-gate: sigmoid(x . gate_weight) on the shared output
  int64_t moe_mlp_glu_interleave_size = 0;   // --moe-mlp-glu-interleave-size (0 = plain [gate; linear])
  bool moe_single_grouped_weight = false;    // --moe-single-grouped-weight: one [E,out,in] tensor per projection
  bool moe_single_grouped_bias = false;      // --moe-single-grouped-bias: one [E,out] bias per projection
  double glu_linear_offset = 0.0;            // --glu-linear-offset: added to the GLU linear half
  double activation_func_clamp_value = 0.0;  // --activation-func-clamp-value (0 = None; MoE experts)

  // mHC hyper-connections (docs/spec/mhc.md, docs/spec/README.md decision 3).
  bool enable_mhc = false;                    // --enable-mhc-connections (alias --enable-hyper-connections)
  int64_t mhc_num_residual_streams = 4;       // --mhc-num-residual-streams (alias --num-residual-streams): n
  int64_t mhc_sinkhorn_iterations = 20;       // --mhc-sinkhorn-iterations
  double mhc_init_gating_factor = 0.01;       // --mhc-init-gating-factor: initial alpha_pre/post/res
  int64_t mhc_recompute_layer_num = 0;        // --mhc-recompute-layer-num (0 = None)
  MhcVariant mhc_variant = MhcVariant::Main;  // --mhc-variant: main | dev (DeepSeek-V4 flavour)

  // Activation recompute (docs/spec/recompute.md, docs/spec/README.md decisions 4-5).
  RecomputeGranularity recompute_granularity = RecomputeGranularity::None;  // --recompute-granularity
  RecomputeMethod recompute_method = RecomputeMethod::None;  // --recompute-method: uniform | block (full)
  int64_t recompute_num_layers = 0;  // --recompute-num-layers: logical layers per unit / checkpointed
  std::vector<RecomputeModule> recompute_modules = {RecomputeModule::CoreAttn};  // --recompute-modules (selective)

  // Derived values (valid after validate()).
  int64_t padded_vocab_size() const;
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
  int64_t kv_heads() const { return group_query_attention ? num_query_groups : num_attention_heads; }
  int64_t ffn_size() const;
  int64_t mamba_heads() const { return mamba_num_heads > 0 ? mamba_num_heads : 2 * hidden_size / mamba_head_dim; }
  int64_t mamba_d_inner() const { return mamba_heads() * mamba_head_dim; }
  int64_t moe_ffn_size() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn_size(); }
  int64_t max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }

  bool recomputes(RecomputeModule m) const;  // selective recompute of m
  // Throws hytra::Error listing every violation.
  void validate() const;
};

}  // namespace hytra
