// Expert parallelism's token exchange (docs/parallelism.md "Expert parallelism"; Megatron's all-to-all dispatcher,
// docs/spec/moe.md): after the local permutation (rows grouped by global expert), each expert's rows travel to the
// rank holding it (an all-to-all of rows, the counts exchanged first), are reordered from (source rank, local
// expert) to (local expert, source rank) for the experts' grouped GEMMs, and come back the same way. The counts go
// through the host (a wait for their copy, once a layer and micro-batch), so expert-parallel steps run eagerly.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/tensor_parallel.h"
#include "ops/exec.h"

namespace hytra {

struct ExpertExchange {
  std::vector<int64_t> send_rows, recv_rows;  // per expert-parallel rank
  int64_t used = 0;                           // rows of the local permutation sent (its experts' rows)
  int64_t rows = 0;                           // rows this rank's experts receive
  Tensor to_local;                            // (rows) int32: the received row each local row reads
  Tensor to_received;                         // (rows) int32: the local row each received row reads
  Tensor local_offsets;                       // (E/ep + 1) int32: the local experts' rows
};

// The ranks' token counts on their way to the host, in two halves: start() gathers every rank's expert offsets (a
// collective of the expert-parallel group) and starts their copy into page-locked host memory, returning at once;
// finish() waits for that copy alone, not for work queued after it (under the EP-overlap schedule: the other pass's
// backward), and builds the exchange, its index tensors uploaded in stream order. A MoE layer keeps one: a start
// and its finish follow each other within one pass.
class CountsExchange {
 public:
  CountsExchange() = default;
  ~CountsExchange();
  CountsExchange(const CountsExchange&) = delete;
  CountsExchange& operator=(const CountsExchange&) = delete;

  // expert_offsets (E + 1, int32, on ex's device) group a dispatch plan's rows by expert.
  void start(Exec& ex, const ExpertParallel& ep, const Tensor& expert_offsets);
  ExpertExchange finish(Exec& ex, const ExpertParallel& ep);

 private:
  Tensor gathered_;            // (P, E + 1) int32 on the device
  int32_t* pinned_ = nullptr;  // CUDA: page-locked host copy of gathered_
  size_t pinned_count_ = 0;
  void* copied_ = nullptr;     // CUDA: an event after the copy
  std::vector<int32_t> host_;  // the gathered offsets on the host
  bool started_ = false;
};

// The exchange when every rank sends `per_expert` rows to each of the `num_experts` experts (a pad-to-capacity plan):
// the same as the counts would give, from no data (no collective, no host wait); its index tensors uploaded to ex's
// device in stream order.
ExpertExchange uniform_exchange(Exec& ex, const ExpertParallel& ep, int64_t num_experts, int64_t per_expert);
// Both halves at once (tests; a collective of the expert-parallel group).
ExpertExchange plan_exchange(Exec& ex, const ExpertParallel& ep, const Tensor& expert_offsets);
// rows (R, w), grouped by global expert -> (exchange.rows, w) for this rank's experts, in local expert order.
Tensor to_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows);
// The reverse: (exchange.rows, w) in local expert order -> (R, w) back in the plan's order (unused rows zero).
Tensor from_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows, int64_t R);

// The same in two halves, for the EP-overlap schedule (train/combined_schedule.h): send_* starts the all-to-all
// (NCCL: on the communicator's stream, the caller's stream not waiting) and arrive_* waits for it and returns the
// rows. The transfer holds what is sent until then, so its memory is not reused while the transfer reads it.
struct RowTransfer {
  Tensor sent, received;
  int64_t ticket = 0;
};
RowTransfer send_to_experts(const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows);
Tensor arrive_at_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, RowTransfer& t);
RowTransfer send_from_experts(Exec& ex, const ExpertParallel& ep, const ExpertExchange& xc, const Tensor& rows,
                              int64_t R);
Tensor arrive_from_experts(const ExpertParallel& ep, RowTransfer& t);

}  // namespace hytra
