#include "train/batch_schedule.h"

#include "core/error.h"

namespace hytra {

BatchRampup rampup_of(const std::vector<int64_t>& values, int64_t global_batch) {
  if (values.empty()) return {};
  HYTRA_CHECK(values.size() == 3,
              "--rampup-batch-size: expected 3 values (start batch size, batch size increment, "
              "ramp-up samples), got ",
              values.size());
  const BatchRampup r{values[0], values[1], values[2]};
  HYTRA_CHECK(r.start > 0, "--rampup-batch-size: expected a positive start batch size, got ", r.start);
  HYTRA_CHECK(r.increment > 0, "--rampup-batch-size: expected a positive batch size increment, got ", r.increment);
  // (Megatron accepts 0, then divides 0 by 0 at the first update)
  HYTRA_CHECK(r.samples > 0, "--rampup-batch-size: expected positive ramp-up samples, got ", r.samples);
  HYTRA_CHECK(r.start < global_batch, "--rampup-batch-size: the start batch size (", r.start,
              ") must be below --global-batch-size (", global_batch, ")");
  HYTRA_CHECK((global_batch - r.start) % r.increment == 0, "--rampup-batch-size: --global-batch-size (", global_batch,
              ") minus the start batch size (", r.start, ") must be a multiple of the increment (", r.increment, ")");
  return r;
}

std::vector<std::string> rampup_errors(const BatchRampup& r, int64_t global_batch, int64_t divisor) {
  std::vector<std::string> errs;
  if (!r.on()) return errs;
  try {
    rampup_of({r.start, r.increment, r.samples}, global_batch);
  } catch (const Error& e) {
    errs.push_back(e.what());
    return errs;
  }
  for (int64_t b = r.start; b <= global_batch && divisor > 0; b += r.increment)
    if (b % divisor != 0) {
      errs.push_back(str("--rampup-batch-size: the ramp's global batch size ", b,
                         " is not a multiple of --micro-batch-size x the data-parallel size (", divisor, ")"));
      break;
    }
  return errs;
}

int64_t global_batch_at(const BatchRampup& r, int64_t global_batch, int64_t consumed) {
  if (!r.on() || consumed > r.samples) return global_batch;
  // Megatron divides in floating point: samples per increment is a real number.
  const double per_increment = double(r.samples) / double((global_batch - r.start) / r.increment);
  return r.start + int64_t(double(consumed) / per_increment) * r.increment;
}

int64_t iterations_for_samples(const BatchRampup& r, int64_t global_batch, int64_t train_samples) {
  if (!r.on()) return train_samples / global_batch;
  int64_t iterations = 0, consumed = 0;
  while (consumed <= r.samples) {
    consumed += global_batch_at(r, global_batch, consumed);
    ++iterations;
  }
  // The constant phase; Python's floor division (a negative remainder counts iterations down).
  const int64_t rest = train_samples - consumed;
  return iterations + (rest >= 0 ? rest / global_batch : -((-rest + global_batch - 1) / global_batch));
}

}  // namespace hytra
