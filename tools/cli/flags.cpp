#include "cli/flags.h"

#include "cli/checkpoint_args.h"
#include "cli/no_effect_flags.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace hytra {

namespace {
using K = FlagSpec::Kind;

FlagValues bool_values(bool b) { return {b ? "true" : "false"}; }

// A bool flag that sets a field to `value` (e.g. --swiglu -> activation = SwiGLU); it reads true while the field
// holds that value.
template <class T>
Binding set_if(T& field, T value) {
  return {[&field, value](const FlagValues& v) {
            if (v[0] == "true") field = value;
          },
          [&field, value] { return std::optional<FlagValues>(bool_values(field == value)); }};
}
// A bool flag that sets a field to its negation (--disable-bias-linear -> add_bias_linear = false).
Binding store_not(bool& field) {
  return {[&field](const FlagValues& v) { field = v[0] != "true"; },
          [&field] { return std::optional<FlagValues>(bool_values(!field)); }};
}
// An enum-valued field: its values' names are the flag's choices (model/enum_text.h).
template <class E>
Binding store_enum(E& field, const char* flag) {
  return {[&field, flag](const FlagValues& v) { field = enum_of<E>(v[0], flag); },
          [&field] {  // (an enum's "None" is Python's None: unset)
            const std::string name = name_of(field);
            return name == "None" ? std::nullopt : std::optional<FlagValues>(FlagValues{name});
          }};
}

// A list of enum values (each element one of the names).
template <class E>
Binding store_enum_list(std::vector<E>& field, const char* flag) {
  return {[&field, flag](const FlagValues& v) {
            field.clear();
            for (const std::string& s : v) field.push_back(enum_of<E>(s, flag));
          },
          [&field] {
            FlagValues out;
            for (E e : field) out.emplace_back(name_of(e));
            return out.empty() ? std::nullopt : std::optional<FlagValues>(out);
          }};
}

}  // namespace

void add_tokenizer_flags(FlagTable& t, TokenizerConfig& c) {
  t.add("--tokenizer-type", K::String, "",
        "GPT2BPETokenizer, HuggingFaceTokenizer, TikTokenizer, NullTokenizer (with --vocab-size), "
        "GPTSentencePieceTokenizer, SentencePieceTokenizer or Llama2Tokenizer",
        store(c.type));
  t.add("--vocab-file", K::String, "", "GPT-2 encoder.json", store(c.vocab_file));
  t.add("--merge-file", K::String, "", "GPT-2 vocab.bpe", store(c.merge_file));
  t.add("--tokenizer-model", K::String, "",
        "Hugging Face tokenizer.json (or its directory); TikTokenizer's JSON; a SentencePiece .model", store(c.model));
  t.add("--legacy-tokenizer", K::Bool, "",
        "SentencePieceTokenizer and Llama2Tokenizer as Megatron's legacy classes (special tokens; a leading bos)",
        store(c.legacy));
  t.add("--tiktoken-pattern", K::String, "", "TikTokenizer's pre-tokenizer: v1 or v2", store(c.tiktoken_pattern),
        {"v1", "v2"});
  t.add("--tiktoken-num-special-tokens", K::Int, "", "TikTokenizer: ids before the vocabulary's",
        store(c.tiktoken_num_special_tokens));
  t.add("--tiktoken-special-tokens", K::StringList, "", "TikTokenizer: the first special tokens (<unk> <s> </s>)",
        store(c.tiktoken_special_tokens));
}

void add_model_flags(FlagTable& t, ModelConfig& c) {
  t.add("--hybrid-layer-pattern", K::String, "",
        "hybrid layer pattern (M * - E G | / [...]); default: [*-] x --num-layers (GPT)",
        store(c.hybrid_layer_pattern));
  t.alias("--hybrid-layer-pattern", "--hybrid-override-pattern");
  t.add("--hybrid-attention-ratio", K::Float, "", "generate a pattern: fraction of attention layers",
        store(c.hybrid_attention_ratio));
  t.add("--hybrid-mlp-ratio", K::Float, "", "generate a pattern: fraction of MLP layers", store(c.hybrid_mlp_ratio));
  t.add("--num-layers", K::Int, "None", "physical layers (derived from the pattern when one is given)",
        store(c.num_layers));
  t.add("--mtp-num-layers", K::Int, "None", "multi-token-prediction depths (from the pattern's '/' parts)",
        store(c.mtp_num_layers));
  t.add("--decoder-first-pipeline-num-layers", K::Int, "None",
        "physical layers of the first pipeline stage (a pattern without pipes)",
        store(c.decoder_first_pipeline_num_layers));
  t.add("--decoder-last-pipeline-num-layers", K::Int, "None",
        "physical layers of the last pipeline stage (a pattern without pipes)",
        store(c.decoder_last_pipeline_num_layers));
  t.add("--enable-mhc-connections", K::Bool, "",
        "mHC: n residual streams mixed by Sinkhorn-projected doubly stochastic matrices", store(c.enable_mhc));
  t.alias("--enable-mhc-connections", "--enable-hyper-connections");
  t.add("--mhc-num-residual-streams", K::Int, "", "mHC residual streams n", store(c.mhc_num_residual_streams));
  t.alias("--mhc-num-residual-streams", "--num-residual-streams");
  t.add("--mhc-sinkhorn-iterations", K::Int, "", "Sinkhorn-Knopp iterations", store(c.mhc_sinkhorn_iterations));
  t.add("--mhc-init-gating-factor", K::Float, "", "initial mHC gating factors alpha", store(c.mhc_init_gating_factor));
  t.add("--mhc-recompute-layer-num", K::Int, "None", "layers per mHC recompute block",
        store(c.mhc_recompute_layer_num));
  t.add("--mhc-variant", K::String, "", "main (Megatron) or dev (DeepSeek-V4: Sinkhorn flavour, H_res^T)",
        store_enum(c.mhc_variant, "--mhc-variant"), names_of<MhcVariant>());
  t.add("--recompute-granularity", K::String, "", "full or selective activation recompute",
        store_enum(c.recompute_granularity, "--recompute-granularity"), {"full", "selective"});
  t.add("--recompute-method", K::String, "", "full recompute: uniform (chunks) or block (the first layers)",
        store_enum(c.recompute_method, "--recompute-method"), {"uniform", "block"});
  t.add("--recompute-num-layers", K::Int, "None", "logical layers per recompute unit (uniform) or checkpointed (block)",
        store(c.recompute_num_layers));
  t.add("--recompute-modules", K::StringList, "", "selective recompute: the modules whose activations are rebuilt",
        store_enum_list(c.recompute_modules, "--recompute-modules"), names_of<RecomputeModule>());
  t.add("--mtp-loss-scaling-factor", K::Float, "", "MTP losses weigh factor / depths each",
        store(c.mtp_loss_scaling_factor));
  t.add("--hidden-size", K::Int, "None", "model width", store(c.hidden_size));
  t.add("--ffn-hidden-size", K::Int, "4*hidden (swiglu: int(8h/3/64)*64)", "dense MLP width", store(c.ffn_hidden_size));
  t.add("--num-attention-heads", K::Int, "None", "query heads", store(c.num_attention_heads));
  t.add("--group-query-attention", K::Bool, "", "use --num-query-groups KV heads", store(c.group_query_attention));
  t.add("--num-query-groups", K::Int, "", "KV heads (with --group-query-attention)", store(c.num_query_groups));
  t.add("--kv-channels", K::Int, "hidden/heads", "head dimension", store(c.kv_channels));
  t.add("--qk-layernorm", K::Bool, "", "normalise q and k over the head dim", store(c.qk_layernorm));
  t.add("--disable-bias-linear", K::Bool, "", "no biases in linear layers", store_not(c.add_bias_linear));
  t.add("--normalization", K::String, "", "LayerNorm or RMSNorm", store_enum(c.normalization, "--normalization"),
        names_of<NormKind>());
  t.add("--norm-epsilon", K::Float, "", "norm epsilon", store(c.norm_epsilon));
  t.add("--swiglu", K::Bool, "", "gated SiLU MLP", set_if(c.activation, Activation::SwiGLU));
  t.add("--squared-relu", K::Bool, "", "squared-ReLU MLP", set_if(c.activation, Activation::SquaredReLU));
  t.add("--quick-geglu", K::Bool, "", "quick-GeGLU MLP: g * sigmoid(1.702 g) * (lin + --glu-linear-offset)",
        set_if(c.activation, Activation::QuickGeGLU));
  t.add("--glu-linear-offset", K::Float, "", "added to the GLU linear half", store(c.glu_linear_offset));
  t.add("--activation-func-clamp-value", K::Float, "None", "MoE GLU clamp: gate <= L, linear in [-L, L]",
        store(c.activation_func_clamp_value));
  t.add("--position-embedding-type", K::String, "", "learned_absolute, rope or none",
        store_enum(c.position_embedding_type, "--position-embedding-type"), names_of<PositionEmbedding>());
  t.add("--max-position-embeddings", K::Int, "seq-length", "position table size", store(c.max_position_embeddings));
  t.add("--rotary-base", K::Float, "", "RoPE theta", store(c.rotary_base));
  t.add("--rotary-percent", K::Float, "", "fraction of the head dim that rotates", store(c.rotary_percent));
  t.add("--rotary-interleaved", K::Bool, "", "rotate adjacent pairs instead of halves", store(c.rotary_interleaved));
  t.add("--multi-latent-attention", K::Bool, "", "a GPT stack's attention layers are multi-latent attention ('+')",
        store(c.multi_latent_attention));
  t.add("--q-lora-rank", K::Int, "None", "MLA: the query latent's rank (None: a plain query projection)",
        store(c.q_lora_rank));
  t.add("--kv-lora-rank", K::Int, "", "MLA: the key/value latent's rank", store(c.kv_lora_rank));
  t.add("--qk-head-dim", K::Int, "", "MLA: query/key channels per head without RoPE", store(c.qk_head_dim));
  t.add("--qk-pos-emb-head-dim", K::Int, "", "MLA: query/key RoPE channels per head (one shared key)",
        store(c.qk_pos_emb_head_dim));
  t.add("--v-head-dim", K::Int, "", "MLA: value channels per head", store(c.v_head_dim));
  t.add("--rotary-scaling-factor", K::Float, "", "MLA YaRN: the context extension factor",
        store(c.rotary_scaling_factor));
  t.add("--rope-type", K::String, "yarn with MLA", "MLA: rope or yarn", store(c.rope_type), {"rope", "yarn"});
  t.add("--mscale", K::Float, "", "MLA YaRN: mscale", store(c.mscale));
  t.add("--mscale-all-dim", K::Float, "", "MLA YaRN: mscale_all_dim", store(c.mscale_all_dim));
  t.add("--untie-embeddings-and-output-weights", K::Bool, "", "separate LM head weight",
        store(c.untie_embeddings_and_output_weights));
  t.add("--init-method-std", K::Float, "", "init std", store(c.init_method_std));
  t.add("--hidden-dropout", K::Float, "", "only 0.0 is implemented (Megatron's default is 0.1)",
        store(c.hidden_dropout));
  t.add("--attention-dropout", K::Float, "", "only 0.0 is implemented (Megatron's default is 0.1)",
        store(c.attention_dropout));
  t.add("--vocab-size", K::Int, "None", "tokenizer vocabulary (NullTokenizer / --mock-data)", store(c.vocab_size));
  t.add("--make-vocab-size-divisible-by", K::Int, "", "vocabulary padding multiple",
        store(c.make_vocab_size_divisible_by));
  t.add("--seq-length", K::Int, "None", "training sequence length", store(c.seq_length));
  t.add("--mamba-state-dim", K::Int, "", "Mamba-2 SSM state size N", store(c.mamba_state_dim));
  t.add("--mamba-head-dim", K::Int, "", "Mamba-2 head dim P", store(c.mamba_head_dim));
  t.add("--mamba-num-groups", K::Int, "", "Mamba-2 B/C groups G", store(c.mamba_num_groups));
  t.add("--mamba-num-heads", K::Int, "2*hidden/head-dim", "Mamba-2 heads H", store(c.mamba_num_heads));
  t.add("--mamba-chunk-size", K::Int, "", "Mamba-2 SSD chunk length (hytra; Megatron's fixed chunk_size)",
        store(c.mamba_chunk_size));
  t.add("--linear-conv-kernel-dim", K::Int, "", "gated delta net causal conv width", store(c.linear_conv_kernel_dim));
  t.add("--linear-key-head-dim", K::Int, "", "gated delta net key head dim", store(c.linear_key_head_dim));
  t.add("--linear-value-head-dim", K::Int, "", "gated delta net value head dim", store(c.linear_value_head_dim));
  t.add("--linear-num-key-heads", K::Int, "", "gated delta net key heads", store(c.linear_num_key_heads));
  t.add("--linear-num-value-heads", K::Int, "", "gated delta net value heads", store(c.linear_num_value_heads));
  t.add("--num-experts", K::Int, "None", "routed experts per MoE layer", store(c.num_experts));
  t.add("--moe-layer-freq", K::String, "1",
        "GPT stacks: the MoE layers, every N-th (N) or a 0/1 list per layer (\"([0]*3+[1]*9)\")",
        store(c.moe_layer_freq));
  t.add("--moe-ffn-hidden-size", K::Int, "ffn-hidden-size", "expert width", store(c.moe_ffn_hidden_size));
  t.add("--moe-router-topk", K::Int, "", "experts per token", store(c.moe_router_topk));
  t.add("--moe-router-score-function", K::String, "", "softmax or sigmoid",
        store_enum(c.moe_router_score_function, "--moe-router-score-function"), names_of<RouterScore>());
  t.add("--moe-router-pre-softmax", K::Bool, "", "softmax over all experts before top-k",
        store(c.moe_router_pre_softmax));
  t.add("--moe-router-num-groups", K::Int, "None", "group-limited routing: expert groups",
        store(c.moe_router_num_groups));
  t.add("--moe-router-group-topk", K::Int, "None", "group-limited routing: groups kept",
        store(c.moe_router_group_topk));
  t.add("--moe-router-topk-scaling-factor", K::Float, "None", "routing probabilities scale",
        store(c.moe_router_topk_scaling_factor));
  t.add("--moe-router-dtype", K::String, "", "router logits dtype (fp64 is not implemented)",
        store_enum(c.moe_router_dtype, "--moe-router-dtype"), {"fp32", "fp64"});
  t.add("--moe-router-enable-expert-bias", K::Bool, "", "aux-loss-free balancing bias (sigmoid routing)",
        store(c.moe_router_enable_expert_bias));
  t.add("--moe-router-bias-update-rate", K::Float, "", "expert bias step per global batch",
        store(c.moe_router_bias_update_rate));
  t.add("--moe-router-load-balancing-type", K::String, "", "aux_loss, seq_aux_loss, global_aux_loss or none",
        store_enum(c.moe_router_load_balancing_type, "--moe-router-load-balancing-type"), names_of<LoadBalancing>());
  t.add("--moe-aux-loss-coeff", K::Float, "", "load-balancing loss weight", store(c.moe_aux_loss_coeff));
  t.add("--moe-z-loss-coeff", K::Float, "None", "router z-loss weight", store(c.moe_z_loss_coeff));
  t.add("--moe-expert-capacity-factor", K::Float, "", "expert capacity factor (None: dropless)",
        store(c.moe_expert_capacity_factor));
  t.add("--moe-token-drop-policy", K::String, "", "probs or position",
        store_enum(c.moe_token_drop_policy, "--moe-token-drop-policy"), names_of<DropPolicy>());
  t.add("--moe-pad-expert-input-to-capacity", K::Bool, "", "pad every expert to its capacity",
        store(c.moe_pad_expert_input_to_capacity));
  t.add("--moe-router-padding-for-quantization", K::Bool, "",
        "pad per-expert token counts to a multiple of 16 (extra tokens routed with probability 0)",
        store(c.moe_router_padding_for_quantization));
  t.alias("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8");
  t.add("--moe-shared-expert-intermediate-size", K::Int, "None", "shared expert width",
        store(c.moe_shared_expert_intermediate_size));
  t.add("--moe-shared-expert-gate", K::Bool, "", "sigmoid gate on the shared expert output",
        store(c.moe_shared_expert_gate));
  t.add("--moe-mlp-glu-interleave-size", K::Int, "None", "GLU rows interleaved in blocks of this size",
        store(c.moe_mlp_glu_interleave_size));
  t.add("--moe-single-grouped-weight", K::Bool, "", "one [E,out,in] weight per expert projection",
        store(c.moe_single_grouped_weight));
  t.add("--moe-single-grouped-bias", K::Bool, "", "one [E,out] bias per expert projection",
        store(c.moe_single_grouped_bias));
}

void add_train_flags(FlagTable& t, TrainConfig& c) {
  t.add("--micro-batch-size", K::Int, "None", "samples per forward/backward", store(c.micro_batch_size));
  t.add("--global-batch-size", K::Int, "micro-batch-size", "samples per optimizer step", store(c.global_batch_size));
  t.add("--train-iters", K::Int, "None", "optimizer steps", store(c.train_iters));
  t.add("--train-samples", K::Int, "None", "the run's length in samples (instead of --train-iters)",
        store(c.train_samples));
  {
    FlagSpec ramp;
    ramp.name = "--rampup-batch-size";
    ramp.kind = K::IntList;
    ramp.default_text = "None";
    ramp.help = "START INCR SAMPLES: the global batch grows from START by INCR over SAMPLES (with --train-samples)";
    ramp.min_values = ramp.max_values = 3;
    ramp.set = [&c](const FlagValues& v) {
      c.rampup = {parse_int_value("--rampup-batch-size", v[0]), parse_int_value("--rampup-batch-size", v[1]),
                  parse_int_value("--rampup-batch-size", v[2])};
      HYTRA_CHECK(c.rampup.on(), "--rampup-batch-size: expected a positive start batch size, got ", c.rampup.start);
    };
    ramp.value = [&c] {
      if (!c.rampup.on()) return std::optional<FlagValues>();
      return std::optional<FlagValues>(FlagValues{std::to_string(c.rampup.start), std::to_string(c.rampup.increment),
                                                  std::to_string(c.rampup.samples)});
    };
    t.add(std::move(ramp));
  }
  t.add("--lr", K::Float, "None", "peak learning rate", store(c.lr));
  t.add("--min-lr", K::Float, "", "learning rate floor", store(c.min_lr));
  t.add("--lr-decay-style", K::String, "", "constant, linear, cosine, inverse-square-root, WSD",
        store_enum(c.lr_decay_style, "--lr-decay-style"), names_of<LrDecayStyle>());
  t.add("--lr-warmup-iters", K::Int, "", "warmup steps", store(c.lr_warmup_iters));
  t.add("--lr-warmup-fraction", K::Float, "None", "warmup as a fraction of the decay steps",
        store(c.lr_warmup_fraction));
  t.add("--lr-warmup-init", K::Float, "", "learning rate at the first step", store(c.lr_warmup_init));
  t.add("--lr-decay-iters", K::Int, "train-iters", "decay horizon", store(c.lr_decay_iters));
  t.add("--lr-wsd-decay-style", K::String, "", "WSD anneal: exponential, linear, cosine, minus_sqrt",
        store_enum(c.lr_wsd_decay_style, "--lr-wsd-decay-style"), names_of<WsdDecayStyle>());
  t.add("--lr-wsd-decay-iters", K::Int, "None", "WSD anneal length", store(c.lr_wsd_decay_iters));
  t.add("--lr-decay-samples", K::Int, "train-samples", "decay horizon in samples (with --train-samples)",
        store(c.lr_decay_samples));
  t.add("--lr-warmup-samples", K::Int, "", "warmup in samples (with --train-samples)", store(c.lr_warmup_samples));
  t.add("--lr-wsd-decay-samples", K::Int, "None", "WSD anneal length in samples (with --train-samples)",
        store(c.lr_wsd_decay_samples));
  t.add("--optimizer", K::String, "", "adam (AdamW; sgd is not implemented)", store_enum(c.optimizer, "--optimizer"),
        names_of<OptimizerKind>());
  t.add("--weight-decay", K::Float, "", "decoupled weight decay (not on norms and biases)", store(c.weight_decay));
  t.add("--clip-grad", K::Float, "", "global gradient-norm clip (0 = off)", store(c.clip_grad));
  t.add("--adam-beta1", K::Float, "", "Adam beta1", store(c.adam_beta1));
  t.add("--adam-beta2", K::Float, "", "Adam beta2", store(c.adam_beta2));
  t.add("--adam-eps", K::Float, "", "Adam epsilon", store(c.adam_eps));
  t.add("--seed", K::Int, "", "seed for init and data",
        {[&c](const FlagValues& v) { c.seed = uint64_t(parse_int_value("--seed", v[0])); },
         [&c] { return std::optional<FlagValues>(FlagValues{std::to_string(int64_t(c.seed))}); }});
  t.add("--eval-interval", K::Int, "", "iterations between validations (0 = never)", store(c.eval_interval));
  t.add("--eval-iters", K::Int, "", "validation batches", store(c.eval_iters));
  t.add("--log-interval", K::Int, "", "iterations per log line", store(c.log_interval));
  t.add("--mock-data", K::Bool, "", "train on synthetic data", store(c.mock_data));
  t.add("--data-path", K::StringList, "", "PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (a blend)", store(c.data_path));
  t.add("--data-cache-path", K::String, "beside the data", "directory of the sampling index caches",
        store(c.data_cache_path));
  t.add("--split", K::String, "", "train, valid, test proportions of each dataset", store(c.split));
  add_tokenizer_flags(t, c.tokenizer);
  t.add("--device", K::String, "", "cpu, cuda or auto", store_enum(c.device, "--device"), names_of<DeviceChoice>());
  t.add("--delay-wgrad-compute", K::Bool, "",
        "queue weight-gradient GEMMs and run them after each micro-batch's backward (identical gradients)",
        store(c.delay_wgrad_compute));
  t.add("--overlap-moe-expert-parallel-comm", K::Bool, "",
        "Megatron's EP-overlap combined 1F1B schedule: each micro-batch's forward interleaved with the previous "
        "one's backward, the all-to-alls of one overlapping the other's computation",
        store(c.overlap_moe_expert_parallel_comm));
  t.add("--log-ep-overlap", K::Bool, "",
        "under --overlap-moe-expert-parallel-comm, log each step's computation and all-to-all busy times and how "
        "much of the all-to-alls was hidden (hytra)",
        store(c.log_ep_overlap));
  t.add("--no-cuda-graph", K::Bool, "",
        "run every micro-batch eagerly (by default a CUDA run replays each training micro-batch's forward and "
        "backward as a captured CUDA graph where the model allows)",
        store(c.no_cuda_graph));
  t.add("--profile-nvtx", K::Bool, "",
        "NVTX ranges for Nsight Systems / Compute: each op call, each sub-layer's forward, backward and weight "
        "gradients, the optimizer step (host-side: with CUDA graphs they mark the capture; add --no-cuda-graph)",
        store(c.profile_nvtx));
  t.add("--bf16", K::Bool, "",
        "bf16 weights and activations with fp32 master weights, gradients and optimizer state (CUDA)", store(c.bf16));
  t.add("--save", K::String, "", "checkpoint directory (SAVE/iter_XXXXXXX)", store(c.save));
  t.add("--load", K::String, "", "resume from the latest checkpoint of this directory", store(c.load));
  t.add("--save-interval", K::Int, "None", "iterations between checkpoints (also saved at the end)",
        store(c.save_interval));
  t.add("--exit-interval", K::Int, "None", "stop (saving first, with --save) when iteration % N == 0",
        store(c.exit_interval));
  t.add("--ckpt-keep", K::Int, "all", "keep only the newest N checkpoints", store(c.ckpt_keep));
  t.add("--exit-signal-handler", K::Bool, "",
        "on SIGTERM, finish the iteration, save a checkpoint (with --save) and exit with status 0",
        store(c.exit_signal_handler));
  t.add("--no-load-optim", K::Bool, "", "do not load the optimizer state", store(c.no_load_optim));
  t.add("--no-load-rng", K::Bool, "", "accepted (hytra's RNG is counter-based: no state)", store(c.no_load_rng));
  t.add("--ckpt-strictness", K::String, "",
        "key mismatches on --load: assume_ok_unexpected, log_all, raise_unexpected, raise_all",
        store_enum(c.ckpt_strictness, "--ckpt-strictness"), names_of<Strictness>());
  t.alias("--ckpt-strictness", "--dist-ckpt-strictness");  // Megatron's name
  t.add("--ckpt-allow-non-finite", K::Bool, "",
        "save and load checkpoints whose tensors hold NaN or Inf (refused by default, naming the tensor)",
        store(c.ckpt_allow_non_finite));
  t.add("--use-checkpoint-args", K::Bool, "",
        "take the model and tokenizer flags from --load's checkpoint (its run_config.yaml), as Megatron",
        store(c.use_checkpoint_args));
  t.add("--finetune", K::Bool, "", "load weights only: iteration 0, fresh optimizer and data position",
        store(c.finetune));
  t.add("--log-jsonl", K::String, "", "append one JSON object per logged iteration to FILE", store(c.log_jsonl));
  t.add("--logging-level", K::Int, "", "print notes of this level and above (10 debug, 20 info, 30 warning, 40 error)",
        store(c.logging_level));
  t.add("--log-throughput", K::Bool, "",
        "the TFLOP/s per GPU in the iteration line (and the TensorBoard scalar "
        "with --log-timers-to-tensorboard)",
        store(c.log_throughput));
  t.add("--log-params-norm", K::Bool, "", "the L2 norm of the weights after each step (line and TensorBoard)",
        store(c.log_params_norm));
  t.add("--log-num-zeros-in-grad", K::Bool, "", "the number of gradient elements equal to zero (line and TensorBoard)",
        store(c.log_num_zeros_in_grad));
  t.add("--check-for-nan-in-loss-and-grad", K::Bool, "",
        "stop on a non-finite loss or gradient norm, naming the first parameter and sub-layer that went non-finite",
        store(c.check_for_nan_in_loss_and_grad));
  t.add("--no-check-for-nan-in-loss-and-grad", K::Bool, "", "train on through a non-finite loss or gradient",
        store_not(c.check_for_nan_in_loss_and_grad));
  t.add("--tensorboard-dir", K::String, "", "write TensorBoard event files (Megatron's scalar names) into DIR",
        store(c.tensorboard_dir));
  t.add("--tensorboard-log-interval", K::Int, "", "iterations between the TensorBoard training scalars",
        store(c.tensorboard_log_interval));
  t.add("--no-log-learnig-rate-to-tensorboard", K::Bool, "", "no learning-rate scalar (Megatron's spelling)",
        store_not(c.log_learning_rate_to_tensorboard));
  t.add("--no-log-loss-scale-to-tensorboard", K::Bool, "", "no loss-scale scalar",
        store_not(c.log_loss_scale_to_tensorboard));
  t.add("--log-batch-size-to-tensorboard", K::Bool, "", "the batch-size scalar",
        store(c.log_batch_size_to_tensorboard));
  t.add("--log-world-size-to-tensorboard", K::Bool, "", "the world-size scalar",
        store(c.log_world_size_to_tensorboard));
  t.add("--log-timers-to-tensorboard", K::Bool, "", "the iteration-time scalar", store(c.log_timers_to_tensorboard));
  t.add("--log-memory-to-tensorboard", K::Bool, "", "the device memory scalars (mem-*)",
        store(c.log_memory_to_tensorboard));
  t.add("--log-validation-ppl-to-tensorboard", K::Bool, "", "the validation perplexity scalars",
        store(c.log_validation_ppl_to_tensorboard));
  t.add("--moe-per-layer-logging", K::Bool, "", "each MoE layer's auxiliary losses as TensorBoard scalars",
        store(c.moe_per_layer_logging));
  // The parallel layout: the data-parallel size is what the launcher's world leaves (docs/parallelism.md).
  t.add("--tensor-model-parallel-size", K::Int, "",
        "tensor-parallel ranks: each layer's weights split over them (docs/parallelism.md)",
        store(c.tensor_model_parallel_size));
  t.add("--sequence-parallel", K::Bool, "",
        "split the activations between the tensor-parallel regions along the sequence (needs tensor parallelism)",
        store(c.sequence_parallel));
  t.add("--pipeline-model-parallel-size", K::Int, "", "pipeline stages (1F1B; the pattern's pipes or an even split)",
        store(c.pipeline_model_parallel_size));
  t.add("--context-parallel-size", K::Int, "", "context-parallel ranks (only 1 runs yet)",
        store(c.context_parallel_size));
  t.add("--expert-model-parallel-size", K::Int, "", "expert-parallel ranks: the routed experts divided among them",
        store(c.expert_model_parallel_size));
  t.add("--use-distributed-optimizer", K::Bool, "",
        "shard the Adam moments and the update over the data-parallel ranks (ZeRO-1)",
        store(c.use_distributed_optimizer));
  t.add("--overlap-grad-reduce", K::Bool, "",
        "reduce each gradient bucket over the data-parallel ranks as soon as the backward completes it",
        store(c.overlap_grad_reduce));
  t.add("--overlap-param-gather", K::Bool, "",
        "gather the distributed optimizer's updated parameters during the next forward, bucket by bucket",
        store(c.overlap_param_gather));
  t.add("--ddp-bucket-size", K::Int, "max(40M, 1M x data-parallel size)",
        "elements a gradient bucket holds under --overlap-grad-reduce", store(c.ddp_bucket_size));
  t.add("--expert-tensor-parallel-size", K::Int, "tensor-model-parallel-size",
        "tensor-parallel ranks of the experts (the tensor-parallel size only)", store(c.expert_tensor_parallel_size));
}

bool parse_train_flags(const std::vector<std::string>& args, ModelConfig& model, TrainConfig& train,
                       std::string* help) {
  FlagTable table;
  add_model_flags(table, model);
  add_train_flags(table, train);
  add_no_effect_flags(table, train);
  FlagTable::Result r = table.parse(args);
  if (r.help) {
    if (help) *help = table.help_text("hytra train [--config FILE]");
    return false;
  }
  if (train.use_checkpoint_args) apply_checkpoint_args(table, train);
  // Before the derived values below, so that reading the file derives them again.
  train.run_config = table.resolved_yaml(
      "hytra train: the resolved flags of this run; `hytra train --config FILE` reads them back.\n"
      "Flags whose default is decided at run time appear only when given.");
  auto given_true = [&table](const char* flag) {
    return table.given(flag) && *table.given(flag) == FlagValues{"true"};
  };
  if (given_true("--swiglu") && given_true("--squared-relu")) fail("--swiglu: cannot be combined with --squared-relu");
  if (train.lr_decay_iters == 0) train.lr_decay_iters = train.train_iters;
  if (train.train_samples > 0) {  // Megatron's update_train_iters (train/batch_schedule.h)
    if (table.is_set("--train-iters")) fail("--train-samples: cannot be combined with --train-iters (give one)");
    HYTRA_CHECK(train.global_batch_size > 0,
                "--train-samples: needs --global-batch-size (the run's iterations are "
                "counted from it)");
    if (train.rampup.on())
      rampup_of({train.rampup.start, train.rampup.increment, train.rampup.samples}, train.global_batch());
    train.train_iters = iterations_for_samples(train.rampup, train.global_batch(), train.train_samples);
  }
  return true;
}

void resolve_train_config(ModelConfig& model, TrainConfig& train) {
  TokenizerConfig& tok = train.tokenizer;
  if (!tok.type.empty()) {
    // Megatron takes the vocabulary from the tokenizer; --vocab-size is for the mock and null tokenizers and sizes
    // TikTokenizer's.
    tok.vocab_size = tok.type == "NullTokenizer" || tok.type == "TikTokenizer" ? model.vocab_size : 0;
    const int64_t v = load_tokenizer(tok)->vocab_size();
    // (NullTokenizer: --vocab-size counts the ids without the end of document, which the tokenizer adds)
    if (model.vocab_size != 0 && model.vocab_size != v && tok.type != "NullTokenizer")
      fail(str("--vocab-size: ", model.vocab_size, " differs from the tokenizer's vocabulary (", v, ")"));
    model.vocab_size = v;
  }
  model.validate();
  train.validate();
}

bool parse_train_args(const std::vector<std::string>& args, ModelConfig& model, TrainConfig& train, std::string* help) {
  if (!parse_train_flags(args, model, train, help)) return false;
  resolve_train_config(model, train);
  return true;
}

}  // namespace hytra
