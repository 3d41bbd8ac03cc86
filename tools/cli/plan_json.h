// The LayerPlan as JSON (the output of `hytra inspect-pattern`; keys documented in docs/pattern.md).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "model/layer_plan.h"

namespace hytra {

// The pipeline rank's schedule of a step (train/pipeline_schedule.h): `hytra inspect-pattern --num-micro-batches`.
struct ScheduleRequest {
  int64_t stages = 1, rank = 0, micro_batches = 1, chunks = 1;
};

std::string plan_to_json(const LayerPlan& plan, const std::optional<ScheduleRequest>& schedule = std::nullopt);

}  // namespace hytra
