// Machine-readable metrics: one JSON object per line, appended and flushed per record, so a crashed
// run keeps every logged iteration and `jq` / pandas can read the file while training runs.
//
// Iteration record keys, in order: "time" (as in the log line), "iteration", "train_iters",
// "consumed_samples", "skipped_samples", "ms_per_iter", "tflops_per_gpu", "tokens_per_s", "lr",
// "global_batch_size", one key per loss under its Megatron name ("lm loss", "mtp_1 loss", ...) and per
// MoE metric ("load_balancing_loss", "z_loss"),
// "loss_scale", "grad_norm", "num_zeros", "params_norm", "skipped_iterations", "nan_iterations",
// and with MoE layers "moe_layers": [{"layer", "load_balancing_loss", "z_loss", "tokens_per_expert"}].
// Optional fields that are unset are left out. Validation records:
// {"validation_iteration": i, "<name>": loss, "<name> ppl": exp(min(20, loss)), ...}.
// Floats are written with %.17g (round-trip exact); NaN and infinities, which JSON lacks, as null.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "train/metrics/log_line.h"

namespace hytra {

// The JSON object for one record, without a newline (exposed for tests).
std::string iteration_json(const IterationLog& log);
std::string validation_json(int64_t iteration, const std::vector<NamedValue>& losses);

class JsonlWriter {
 public:
  // Opens `path` for appending (created if missing); an error names the file.
  explicit JsonlWriter(const std::string& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const IterationLog& log);
  void write_validation(int64_t iteration, const std::vector<NamedValue>& losses);

 private:
  void write_line(const std::string& json);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace hytra
