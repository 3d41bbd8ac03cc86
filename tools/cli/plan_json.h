// The LayerPlan as JSON (the output of `hytra inspect-pattern`; keys documented in docs/pattern.md).
#pragma once
#include <string>

#include "model/layer_plan.h"

namespace hytra {

std::string plan_to_json(const LayerPlan& plan);

}  // namespace hytra
