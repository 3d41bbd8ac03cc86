#include "train/train_config.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace hytra {

void TrainConfig::validate() const {
  std::vector<std::string> errs;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) errs.push_back(msg);
  };
  need(micro_batch_size > 0, str("--micro-batch-size: expected a positive integer, got ", micro_batch_size));
  if (micro_batch_size > 0)
    need(global_batch_size >= 0 && global_batch() % micro_batch_size == 0,
         str("--global-batch-size: expected a multiple of --micro-batch-size (", micro_batch_size, "), got ",
             global_batch_size));
  need(train_iters > 0, str("--train-iters: expected a positive integer, got ", train_iters));
  need(lr >= 0 && std::isfinite(lr), str("--lr: expected a finite non-negative number, got ", lr));
  need(min_lr >= 0 && min_lr <= lr, str("--min-lr: expected a value in [0, --lr], got ", min_lr));
  need(lr_warmup_iters >= 0, str("--lr-warmup-iters: expected >= 0, got ", lr_warmup_iters));
  need(lr_warmup_fraction < 0 || lr_warmup_iters == 0,
       "--lr-warmup-fraction: cannot be combined with --lr-warmup-iters");
  need(lr_warmup_fraction < 0 || lr_warmup_fraction <= 1,
       str("--lr-warmup-fraction: expected a value in [0, 1], got ", lr_warmup_fraction));
  need(optimizer == "adam", str("--optimizer: expected adam (AdamW; sgd is not implemented), got '", optimizer, "'"));
  need(weight_decay >= 0, str("--weight-decay: expected >= 0, got ", weight_decay));
  need(clip_grad >= 0, str("--clip-grad: expected >= 0, got ", clip_grad));
  need(adam_beta1 >= 0 && adam_beta1 < 1, str("--adam-beta1: expected a value in [0, 1), got ", adam_beta1));
  need(adam_beta2 >= 0 && adam_beta2 < 1, str("--adam-beta2: expected a value in [0, 1), got ", adam_beta2));
  need(adam_eps > 0, str("--adam-eps: expected a positive number, got ", adam_eps));
  need(eval_interval >= 0, str("--eval-interval: expected >= 0, got ", eval_interval));
  need(eval_iters >= 0, str("--eval-iters: expected >= 0, got ", eval_iters));
  need(log_interval > 0, str("--log-interval: expected a positive integer, got ", log_interval));
  need(mock_data != !data_path.empty(), "--data-path: give either --data-path (Megatron .bin/.idx files) or --mock-data");
  need(data_path.empty() || !tokenizer_type.empty(),
       "--tokenizer-type: required with --data-path (it fixes the vocabulary size)");
  need(device == "cpu" || device == "cuda" || device == "auto",
       str("--device: expected cpu, cuda or auto, got '", device, "'"));
  if (!errs.empty()) {
    std::string msg = "invalid training configuration:";
    for (auto& e : errs) msg += "\n  " + e;
    fail(msg);
  }
}

}  // namespace hytra
