#include "train/train_config.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/nvtx.h"

namespace hytra {

void TrainConfig::validate() const {
  std::vector<std::string> errs;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) errs.push_back(msg);
  };
  need(micro_batch_size > 0, str("--micro-batch-size: expected a positive integer, got ", micro_batch_size));
  need(!profile_nvtx || nvtx_available(),
       "--profile-nvtx: this hytra build has no CUDA backend (NVTX comes with the CUDA toolkit; build with nvcc)");
  // As ModelConfig's sizes: batch x sequence x width must stay inside 64-bit shape arithmetic.
  for (auto [flag, v] : {std::pair<const char*, int64_t>{"--micro-batch-size", micro_batch_size},
                         {"--global-batch-size", global_batch_size}})
    need(v <= INT32_MAX, str(flag, ": expected at most ", INT32_MAX, ", got ", v));
  if (micro_batch_size > 0 && data_parallel_size == 1)
    need(global_batch_size >= 0 && global_batch() % micro_batch_size == 0,
         str("--global-batch-size: expected a multiple of --micro-batch-size (", micro_batch_size, "), got ",
             global_batch_size));
  if (micro_batch_size > 0 && data_parallel_size > 1)
    need(global_batch_size >= 0 && global_batch() % (micro_batch_size * data_parallel_size) == 0,
         str("--global-batch-size: expected a multiple of --micro-batch-size (", micro_batch_size,
             ") x the data-parallel size (", data_parallel_size, ") = ", micro_batch_size * data_parallel_size,
             ", got ", global_batch()));
  need(tensor_model_parallel_size >= 1,
       str("--tensor-model-parallel-size: expected a positive integer, got ", tensor_model_parallel_size));
  need(!sequence_parallel || tensor_model_parallel_size > 1,
       "--sequence-parallel: needs --tensor-model-parallel-size above 1 (it splits the activations between the "
       "tensor-parallel regions)");
  need(!log_ep_overlap || overlap_moe_expert_parallel_comm,
       "--log-ep-overlap: needs --overlap-moe-expert-parallel-comm (it times that schedule)");
  need(context_parallel_size == 1, str("--context-parallel-size ", context_parallel_size,
                                      ": context parallelism is not built yet (leave it at 1)"));
  need(expert_model_parallel_size >= 1,
       str("--expert-model-parallel-size: expected a positive integer, got ", expert_model_parallel_size));

  // The routed experts split over the tensor-parallel ranks like the dense layers (Megatron's default); other expert
  // tensor-parallel sizes are not built.
  need(expert_tensor_parallel_size == 0 || expert_tensor_parallel_size == tensor_model_parallel_size,
       str("--expert-tensor-parallel-size ", expert_tensor_parallel_size,
           ": the experts split over the tensor-parallel ranks alone (leave it unset or equal to "
           "--tensor-model-parallel-size, ",
           tensor_model_parallel_size, ")"));
  need(ddp_bucket_size >= 0, str("--ddp-bucket-size: expected a positive number of elements, got ", ddp_bucket_size));
  // As Megatron: the gathers overlap only what the sharded optimizer gathers, after overlapped reductions.
  need(!overlap_param_gather || (use_distributed_optimizer && overlap_grad_reduce),
       "--overlap-param-gather: needs --use-distributed-optimizer and --overlap-grad-reduce");
  need(pipeline_model_parallel_size >= 1,
       str("--pipeline-model-parallel-size: expected a positive integer, got ", pipeline_model_parallel_size));
  need(train_samples >= 0, str("--train-samples: expected a positive integer, got ", train_samples));
  if (train_samples > 0) {  // Megatron's sample-based checks: the iteration-based lengths stay unset
    need(train_iters > 0, str("--train-samples ", train_samples, ": fewer samples than one global batch (",
                              global_batch(), ") gives no iteration"));
    need(lr_decay_iters == 0, "--lr-decay-iters: a sample-based run (--train-samples) takes --lr-decay-samples");
    need(lr_warmup_iters == 0, "--lr-warmup-iters: a sample-based run (--train-samples) takes --lr-warmup-samples");
    need(lr_wsd_decay_iters == 0,
         "--lr-wsd-decay-iters: a sample-based run (--train-samples) takes --lr-wsd-decay-samples");
    need(lr_warmup_fraction < 0 || lr_warmup_samples == 0,
         "--lr-warmup-fraction: cannot be combined with --lr-warmup-samples");
    need(lr_decay_samples >= 0 && lr_warmup_samples >= 0 && lr_wsd_decay_samples >= 0,
         "--lr-decay-samples, --lr-warmup-samples, --lr-wsd-decay-samples: expected non-negative sample counts");
    if (micro_batch_size > 0)
      for (const std::string& e : rampup_errors(rampup, global_batch(), micro_batch_size * data_parallel_size))
        need(false, e);
  } else {
    need(train_iters > 0 || train_samples < 0,
         str("--train-iters: expected a positive integer (or --train-samples), got ", train_iters));
    for (auto [flag, v] : {std::pair<const char*, int64_t>{"--lr-decay-samples", lr_decay_samples},
                           {"--lr-warmup-samples", lr_warmup_samples},
                           {"--lr-wsd-decay-samples", lr_wsd_decay_samples}})
      need(v == 0, str(flag, ": needs a sample-based run (--train-samples); with --train-iters give the ",
                       "iteration-based flag"));
    need(!rampup.on(),
         "--rampup-batch-size: needs a sample-based run (--train-samples instead of --train-iters), "
         "as in Megatron");
  }
  need(lr >= 0 && std::isfinite(lr), str("--lr: expected a finite non-negative number, got ", lr));
  need(min_lr >= 0 && min_lr <= lr, str("--min-lr: expected a value in [0, --lr], got ", min_lr));
  need(lr_warmup_iters >= 0, str("--lr-warmup-iters: expected >= 0, got ", lr_warmup_iters));
  need(lr_decay_iters >= 0, str("--lr-decay-iters: expected a positive integer, got ", lr_decay_iters));
  need(lr_wsd_decay_iters >= 0, str("--lr-wsd-decay-iters: expected a positive integer, got ", lr_wsd_decay_iters));
  need(lr_warmup_init >= 0, str("--lr-warmup-init: expected >= 0, got ", lr_warmup_init));
  need(lr_warmup_fraction < 0 || lr_warmup_iters == 0,
       "--lr-warmup-fraction: cannot be combined with --lr-warmup-iters");
  need(lr_warmup_fraction < 0 || lr_warmup_fraction <= 1,
       str("--lr-warmup-fraction: expected a value in [0, 1], got ", lr_warmup_fraction));
  need(optimizer == OptimizerKind::Adam, "--optimizer: sgd is not implemented in hytra (use adam: AdamW)");
  need(weight_decay >= 0 && std::isfinite(weight_decay),
       str("--weight-decay: expected a finite number >= 0, got ", weight_decay));
  need(clip_grad >= 0 && std::isfinite(clip_grad), str("--clip-grad: expected a finite number >= 0, got ", clip_grad));
  need(adam_beta1 >= 0 && adam_beta1 < 1, str("--adam-beta1: expected a value in [0, 1), got ", adam_beta1));
  need(adam_beta2 >= 0 && adam_beta2 < 1, str("--adam-beta2: expected a value in [0, 1), got ", adam_beta2));
  need(adam_eps > 0 && std::isfinite(adam_eps), str("--adam-eps: expected a positive finite number, got ", adam_eps));
  need(eval_interval >= 0, str("--eval-interval: expected >= 0, got ", eval_interval));
  need(eval_iters >= 0, str("--eval-iters: expected >= 0, got ", eval_iters));
  need(log_interval > 0, str("--log-interval: expected a positive integer, got ", log_interval));
  need(logging_level >= 0 && logging_level <= 50,
       str("--logging-level: expected a level from 0 to 50 (10 debug, 20 info, 30 warning, 40 error), got ",
           logging_level));
  need(tensorboard_log_interval > 0,
       str("--tensorboard-log-interval: expected a positive integer, got ", tensorboard_log_interval));
  for (auto [flag, v] : {std::pair<const char*, int64_t>{"--save-interval", save_interval},
                         {"--exit-interval", exit_interval},
                         {"--ckpt-keep", ckpt_keep}})
    need(v >= 0, str(flag, ": expected a positive integer, got ", v));
  need(mock_data != !data_path.empty(),
       "--data-path: give either --data-path (Megatron .bin/.idx files) or --mock-data");
  need(data_path.empty() || seed <= UINT32_MAX,
       str("--seed: expected 0..", UINT32_MAX, " with --data-path (the shuffle is numpy's RandomState, as in ",
           "Megatron), got ", int64_t(seed)));
  need(data_path.empty() || !tokenizer.type.empty(),
       "--tokenizer-type: required with --data-path (it fixes the vocabulary size)");
  if (!errs.empty()) {
    std::string msg = "invalid training configuration:";
    for (auto& e : errs) msg += "\n  " + e;
    fail(msg);
  }
}

}  // namespace hytra
