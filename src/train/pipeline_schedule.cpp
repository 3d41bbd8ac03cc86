#include "train/pipeline_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace hytra {

std::string PipelineAction::text(bool interleaved) const {
  return str(forward ? "F" : "B", micro, interleaved ? str(".", chunk) : std::string());
}

std::vector<PipelineAction> pipeline_schedule(int64_t stages, int64_t rank, int64_t micro_batches, int64_t chunks,
                                              bool combined) {
  HYTRA_CHECK(stages >= 1, "--pipeline-model-parallel-size: expected a positive count, got ", stages);
  HYTRA_CHECK(rank >= 0 && rank < stages, "pipeline rank ", rank, " outside the ", stages, " stages");
  HYTRA_CHECK(micro_batches >= 1, "the pipeline needs at least one micro-batch, got ", micro_batches);
  HYTRA_CHECK(chunks >= 1, "virtual pipeline stages: expected a positive count a rank, got ", chunks);
  HYTRA_CHECK(chunks == 1 || micro_batches % stages == 0, "the interleaved pipeline schedule runs a multiple of ",
              "--pipeline-model-parallel-size (", stages, ") micro-batches a step, got ", micro_batches,
              " (global batch / (micro-batch x data-parallel size))");
  std::vector<PipelineAction> out;
  if (chunks == 1) {
    const int64_t warmup = pipeline_warmup(stages, rank, micro_batches);
    for (int64_t m = 0; m < warmup; ++m) out.push_back({true, m, 0});
    for (int64_t m = warmup; m < micro_batches; ++m) {
      out.push_back({true, m, 0});
      out.push_back({false, m - warmup, 0});
    }
    for (int64_t m = micro_batches - warmup; m < micro_batches; ++m) out.push_back({false, m, 0});
    return out;
  }
  const int64_t total = micro_batches * chunks;
  const int64_t warmup = interleaved_warmup(stages, rank, micro_batches, chunks, combined);
  auto action = [&](int64_t k, bool forward) { return interleaved_action(stages, chunks, k, forward); };
  for (int64_t k = 0; k < warmup; ++k) out.push_back(action(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(action(warmup + k, true));
    out.push_back(action(k, false));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(action(k, false));
  return out;
}

int64_t pipeline_warmup(int64_t stages, int64_t rank, int64_t micro_batches) {
  return std::min(stages - rank - 1, micro_batches);
}

int64_t interleaved_warmup(int64_t stages, int64_t rank, int64_t micro_batches, int64_t chunks, bool combined) {
  const int64_t total = micro_batches * chunks;
  if (micro_batches == stages) return total;
  return std::min(total, (stages - rank - 1) * 2 + (chunks - 1) * stages + (combined ? 1 : 0));
}

PipelineAction interleaved_action(int64_t stages, int64_t chunks, int64_t k, bool forward) {
  const int64_t group = stages * chunks, chunk = (k % group) / stages;
  return PipelineAction{forward, (k / group) * stages + k % stages, forward ? chunk : chunks - 1 - chunk};
}

double pipeline_bubble_fraction(int64_t stages, int64_t micro_batches, int64_t chunks) {
  return double(stages - 1) / double(chunks * micro_batches + stages - 1);
}

}  // namespace hytra
