#include "cli/bench.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "ops/ops.h"
#include "train/trainer.h"

namespace hytra {

void check_bench_counts(int64_t warmup, int64_t steps) {
  HYTRA_CHECK(warmup >= 0, "--warmup: expected a count >= 0, got ", warmup);
  HYTRA_CHECK(steps >= 1, "--steps: expected a count >= 1, got ", steps);
  HYTRA_CHECK(warmup <= INT64_MAX - steps, "--warmup + --steps: ", warmup, " + ", steps,
              " iterations overflow a 64-bit count");
}

BenchResult run_bench(const std::string& name, const ModelConfig& model, TrainConfig train, int64_t warmup,
                      int64_t steps, std::ostream& log, dist::ParallelContext* par) {
  check_bench_counts(warmup, steps);
  // Resuming would skip the iterations the checkpoint has done, and with them the measured ones.
  HYTRA_CHECK(train.load.empty(), "--load: bench measures a fresh run of the config; it cannot resume ", train.load,
              " (drop --load)");
  train.train_iters = warmup + steps;
  train.eval_interval = 0;
  train.save.clear();
  train.exit_interval = 0;
  train.log_interval = std::max<int64_t>(1, train.train_iters / 4);
  TrainResult t = hytra::train(model, train, log, par);
  HYTRA_ASSERT(int64_t(t.iter_seconds.size()) == warmup + steps, "bench: expected ", warmup + steps,
               " iteration times, got ", t.iter_seconds.size());
  std::vector<double> measured(t.iter_seconds.begin() + warmup, t.iter_seconds.end());
  std::sort(measured.begin(), measured.end());
  const size_t n = measured.size();
  const double median = n % 2 ? measured[n / 2] : 0.5 * (measured[n / 2 - 1] + measured[n / 2]);

  BenchResult r;
  r.name = name;
  r.micro_batch = train.micro_batch_size;
  r.global_batch = train.global_batch();
  r.seq_length = model.seq_length;
  r.steps = steps;
  r.step_ms = median * 1e3;
  r.tokens_per_s = double(r.global_batch * r.seq_length) / median;
  r.gpus = int(train.data_parallel_size * train.tensor_model_parallel_size * train.pipeline_model_parallel_size);  // ranks
  r.tflops_per_gpu = t.flops_per_token * r.tokens_per_s / 1e12 / double(r.gpus);
  r.mfu = r.tflops_per_gpu * 1e12 / kPeakBf16Flops;
  r.peak_mem_gib = double(t.peak_memory_bytes) / double(1ll << 30);
  r.last_loss = t.losses.back();
  r.num_params = t.num_params;
  r.flops_per_token = t.flops_per_token;
  return r;
}

void skew_routing(ParamStore& store) {
  int layers = 0;
  for (Param* p : store.all()) {
    if (!p->name.ends_with("mlp.router.expert_bias")) continue;
    Tensor host = p->master.to(Device::CPU);
    if (host.dtype() == DType::F64)
      host.data<double>()[0] = 1.0;
    else
      host.data<float>()[0] = 1.0f;
    Exec& ex = Exec::for_device(p->master.device());
    ops::copy(ex, p->master, host.to(p->master.device()));
    if (p->value.raw() != p->master.raw()) ops::copy(ex, p->value, p->master);
    ++layers;
  }
  HYTRA_CHECK(layers > 0,
              "--skew-routing: the model has no router expert bias (it needs MoE layers with "
              "--moe-router-enable-expert-bias)");
}

std::string format_bench_record(const BenchResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "hytra config=%s gpus=%d mbs=%lld gbs=%lld seq=%lld step_ms=%.2f tokens_per_s=%.0f tflops_per_gpu=%.1f "
                "mfu=%.1f%% peak_mem_gib=%.2f loss=%.4f",
                r.name.c_str(), r.gpus, (long long)r.micro_batch, (long long)r.global_batch, (long long)r.seq_length,
                r.step_ms, r.tokens_per_s, r.tflops_per_gpu, 100.0 * r.mfu, r.peak_mem_gib, r.last_loss);
  return buf;
}

}  // namespace hytra
