// TrainConfig: the run (batching, optimizer, schedule, evaluation, logging). Each field names its
// Megatron-LM flag and default (docs/spec/megatron_cli.md §6). validate() collects every violation and throws them
// together; after it the config is const.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/key_map.h"
#include "data/preprocess.h"
#include "model/enum_text.h"
#include "train/batch_schedule.h"
#include "train/lr_schedule.h"

namespace hytra {

class ParamStore;

enum class DeviceChoice { Auto, CPU, CUDA };  // --device
enum class OptimizerKind { Adam, Sgd };       // --optimizer (Adam is AdamW; SGD is refused by validate)
template <>
struct EnumText<OptimizerKind> {
  static constexpr std::array<std::pair<OptimizerKind, const char*>, 2> names = {
      {{OptimizerKind::Adam, "adam"}, {OptimizerKind::Sgd, "sgd"}}};
};
template <>
struct EnumText<DeviceChoice> {
  static constexpr std::array<std::pair<DeviceChoice, const char*>, 3> names = {
      {{DeviceChoice::Auto, "auto"}, {DeviceChoice::CPU, "cpu"}, {DeviceChoice::CUDA, "cuda"}}};
};
template <>
struct EnumText<Strictness> {
  static constexpr std::array<std::pair<Strictness, const char*>, 4> names = {
      {{Strictness::AssumeOkUnexpected, "assume_ok_unexpected"},
       {Strictness::LogAll, "log_all"},
       {Strictness::RaiseUnexpected, "raise_unexpected"},
       {Strictness::RaiseAll, "raise_all"}}};
};

struct TrainConfig {
  int64_t micro_batch_size = 0;   // --micro-batch-size: samples per forward/backward
  int64_t global_batch_size = 0;  // --global-batch-size: samples per step; 0 = micro-batch x data-parallel size
  int64_t train_iters = 0;        // --train-iters: optimizer steps (set from --train-samples when that is given)
  // Sample-based runs (train/batch_schedule.h): the run's length and the schedule's lengths in samples.
  int64_t train_samples = 0;         // --train-samples (0: iteration-based)
  int64_t lr_decay_samples = 0;      // --lr-decay-samples: 0 = train samples
  int64_t lr_warmup_samples = 0;     // --lr-warmup-samples
  int64_t lr_wsd_decay_samples = 0;  // --lr-wsd-decay-samples
  BatchRampup rampup;                // --rampup-batch-size START INCR SAMPLES (sample-based runs only)

  double lr = 0.0;                                     // --lr: peak learning rate
  double min_lr = 0.0;                                 // --min-lr
  LrDecayStyle lr_decay_style = LrDecayStyle::Linear;  // --lr-decay-style
  int64_t lr_warmup_iters = 0;                         // --lr-warmup-iters
  double lr_warmup_fraction = -1.0;                    // --lr-warmup-fraction: of the decay steps (-1 = unset)
  double lr_warmup_init = 0.0;                         // --lr-warmup-init: lr at the first step
  int64_t lr_decay_iters = 0;                          // --lr-decay-iters: 0 = train iters
  WsdDecayStyle lr_wsd_decay_style = WsdDecayStyle::Exponential;  // --lr-wsd-decay-style
  int64_t lr_wsd_decay_iters = 0;                                 // --lr-wsd-decay-iters

  OptimizerKind optimizer = OptimizerKind::Adam;  // --optimizer: adam (AdamW)
  double weight_decay = 0.01;                     // --weight-decay (not applied to norms and biases)
  double clip_grad = 1.0;                         // --clip-grad: global L2 norm; 0 disables
  double adam_beta1 = 0.9;                        // --adam-beta1
  double adam_beta2 = 0.999;                      // --adam-beta2
  double adam_eps = 1e-8;                         // --adam-eps

  uint64_t seed = 1234;                      // --seed: init and data order
  int64_t eval_interval = 1000;              // --eval-interval: iterations between validations (0 = never)
  int64_t eval_iters = 100;                  // --eval-iters: validation batches
  int64_t log_interval = 100;                // --log-interval: iterations per log line
  bool mock_data = false;                    // --mock-data: synthetic data (data/mock_dataset.h)
  std::vector<std::string> data_path;        // --data-path: PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (blend)
  std::string split = "969, 30, 1";          // --split: train, valid, test proportions
  std::string data_cache_path;               // --data-cache-path: index caches (default: beside the data)
  // --tokenizer-type and its files and options (its vocab_size is set from --vocab-size when the tokenizer loads).
  TokenizerConfig tokenizer;
  DeviceChoice device = DeviceChoice::Auto;  // --device: cpu | cuda | auto (cuda when a GPU is visible)
  bool bf16 = false;                         // --bf16: bf16 activations/weights with fp32 master (CUDA)
  bool delay_wgrad_compute = false;          // --delay-wgrad-compute: weight-gradient GEMMs run after each
                                             // micro-batch's backward (backward_dw), same gradients
  bool overlap_moe_expert_parallel_comm = false;  // --overlap-moe-expert-parallel-comm: the EP-overlap schedule
  bool log_ep_overlap = false;                    // --log-ep-overlap: each step's stream timeline under it (hytra)
  bool check_for_nan_in_loss_and_grad = true;     // off: --no-check-for-nan-in-loss-and-grad (training goes on)
  bool exit_signal_handler = false;          // --exit-signal-handler: SIGTERM saves and exits 0 (train/exit_signal.h)
  bool no_cuda_graph = false;                // --no-cuda-graph: no CUDA-graph capture of the micro-batches
  bool profile_nvtx = false;                 // --profile-nvtx: NVTX ranges per op, sub-layer and phase (core/nvtx.h)
  std::string log_jsonl;                     // --log-jsonl FILE: one JSON object per logged iteration (hytra)
  bool log_throughput = false;               // --log-throughput: TFLOP/s per GPU in the iteration line
  int64_t logging_level = 20;                // --logging-level: notes at this level and above (core/log.h)
  bool log_params_norm = false;              // --log-params-norm: the master weights' L2 norm, after each step
  bool log_num_zeros_in_grad = false;        // --log-num-zeros-in-grad: gradient elements equal to zero
  // TensorBoard (train/metrics/tensorboard.h; docs/configuration.md lists the tags): event files in this directory.
  std::string tensorboard_dir;                   // --tensorboard-dir
  int64_t tensorboard_log_interval = 1;          // --tensorboard-log-interval: iterations between the training scalars
  bool log_learning_rate_to_tensorboard = true;  // off: --no-log-learnig-rate-to-tensorboard (Megatron's spelling)
  bool log_loss_scale_to_tensorboard = true;     // off: --no-log-loss-scale-to-tensorboard
  bool log_batch_size_to_tensorboard = false;    // --log-batch-size-to-tensorboard
  bool log_world_size_to_tensorboard = false;    // --log-world-size-to-tensorboard
  bool log_timers_to_tensorboard = false;        // --log-timers-to-tensorboard: iteration-time
  bool log_memory_to_tensorboard = false;        // --log-memory-to-tensorboard: mem-*-bytes, mem-allocated-count
  bool log_validation_ppl_to_tensorboard = false;  // --log-validation-ppl-to-tensorboard
  bool moe_per_layer_logging = false;              // --moe-per-layer-logging: moe/<name>_layer_<i> scalars
  // Megatron flags given that change nothing in hytra, each with why (tools/cli/no_effect_flags.h); logged once.
  std::vector<std::string> no_effect;
  std::string save;                          // --save DIR: checkpoint directory
  std::string load;                          // --load DIR: resume (or --finetune) from its latest checkpoint
  int64_t save_interval = 0;                 // --save-interval: iterations between saves (0: only at the end)
  int64_t exit_interval = 0;                 // --exit-interval: stop (after saving) when iteration % N == 0
  int64_t ckpt_keep = 0;                     // --ckpt-keep N: keep the newest N checkpoints (0: all)
  bool no_load_optim = false;                // --no-load-optim: fresh optimizer state
  bool no_load_rng = false;                  // --no-load-rng: accepted; hytra's RNG is counter-based (no state)
  Strictness ckpt_strictness = Strictness::AssumeOkUnexpected;  // --ckpt-strictness (checkpoint/key_map.h)
  bool finetune = false;               // --finetune: weights only; iteration, data position, optimizer reset
  bool ckpt_allow_non_finite = false;  // --ckpt-allow-non-finite (hytra): save/load tensors holding NaN/Inf
  // --use-checkpoint-args: the model and tokenizer flags come from --load's run_config.yaml (tools/cli/flags.h).
  bool use_checkpoint_args = false;
  std::vector<std::string> from_checkpoint;  // what it set ("--hidden-size 64 (was 32)"), logged once each
  // The run's resolved flags as a YAML file that --config reads (tools/cli/flags.h); each checkpoint's
  // run_config.yaml. Empty: none written.
  std::string run_config;

  // The parallel layout (docs/parallelism.md). Only data parallelism runs yet: the other sizes must be 1.
  int tensor_model_parallel_size = 1;      // --tensor-model-parallel-size
  bool sequence_parallel = false;          // --sequence-parallel
  int pipeline_model_parallel_size = 1;    // --pipeline-model-parallel-size
  int context_parallel_size = 1;           // --context-parallel-size
  int expert_model_parallel_size = 1;      // --expert-model-parallel-size
  int expert_tensor_parallel_size = 0;     // --expert-tensor-parallel-size (0: the tensor-parallel size)
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer: Adam state and update sharded over dp
  int64_t ddp_bucket_size = 0;             // --ddp-bucket-size: elements a bucket under overlap (0: Megatron's)
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce: bucket reductions during the backward
  bool overlap_param_gather = false;       // --overlap-param-gather: bucket gathers during the next forward
  // Not a flag: the world size over the model-parallel sizes, set by the launcher's world (1: one process).
  int64_t data_parallel_size = 1;

  // Micro-batches a step on each data-parallel rank (at the full global batch: after any ramp, and in validation).
  int64_t num_micro_batches() const { return global_batch() / (micro_batch_size * data_parallel_size); }
  int64_t global_batch() const {
    return global_batch_size > 0 ? global_batch_size : micro_batch_size * data_parallel_size;
  }
  // The global batch and micro-batches of the iteration that starts after `consumed` samples (the ramp's).
  int64_t global_batch_at(int64_t consumed) const { return hytra::global_batch_at(rampup, global_batch(), consumed); }
  int64_t num_micro_batches_at(int64_t consumed) const {
    return global_batch_at(consumed) / (micro_batch_size * data_parallel_size);
  }

  // Not a flag: a tool's change to the freshly initialised parameters before the first step (`hytra bench
  // --skew-routing`); unset in training.
  std::function<void(ParamStore&)> after_init;

  void validate() const;
};

}  // namespace hytra
