// The MoE dispatch plan built on the host from the routing read back: the reference the device plans
// (ops::moe_plan_dropless, ops::moe_plan_capacity through nn/moe/token_dispatcher.h) are tested against, with
// the semantics of token_dispatcher.h's header (capacity, drop policy, padding to the capacity or a multiple).
#pragma once
#include <cstdint>
#include <vector>

#include "nn/moe/token_dispatcher.h"

namespace hytra {

struct HostPlan : DispatchPlan {
  std::vector<int64_t> rows_per_expert;    // (E) dispatched rows, padding included
  std::vector<int64_t> routed_per_expert;  // (E) routed tokens kept (after dropping, before padding)
};

// top (N*K) expert ids and probs (N*K) of the router, row-major (token t's choices at t*K..); the plan's
// tensors on `device`, exactly R = the used rows.
HostPlan host_dispatch_plan(const std::vector<int32_t>& top, const std::vector<double>& probs, int64_t num_tokens,
                            const DispatchOptions& opt, Device device);

}  // namespace hytra
