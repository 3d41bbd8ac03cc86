// The order in which one pipeline rank runs the forward and backward passes of a step's micro-batches
// (docs/parallelism.md "Pipeline schedules"), Megatron-Core's two schedules:
//  - 1F1B (one model chunk a rank): rank r first runs min(P - r - 1, M) forwards (the warm-up), then
//    alternates one forward and one backward, then runs the remaining backwards (the cool-down). A rank
//    holds at most P - r micro-batches' activations at once.
//  - interleaved 1F1B (V > 1 model chunks a rank, virtual stage s = chunk x P + rank): the M x V virtual
//    micro-batches go in groups of P micro-batches a chunk; virtual micro-batch k is micro-batch
//    (k / (P V)) P + k % P of chunk (k % (P V)) / P in the forward order, of chunk V - 1 - that in the
//    backward order; the warm-up is (P - r - 1) x 2 + (V - 1) x P of them (all M V when M = P). M must be a
//    multiple of P, as Megatron requires. Under the EP-overlap schedule (`combined`, each steady step's forward and
//    backward one combined 1F1B pair) the warm-up is one longer, as Megatron's: otherwise the last rank's steady
//    forward and backward would be one micro-batch's.
// The ideal bubble of both: (P - 1) / (V M + P - 1) of the step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hytra {

struct PipelineAction {
  bool forward = true;
  int64_t micro = 0;  // the micro-batch
  int64_t chunk = 0;  // the model chunk of this rank (0 without interleaving)
  // "F3" / "B3"; under interleaving with the chunk: "F3.1".
  std::string text(bool interleaved) const;
};

// Rank `rank`'s actions for `micro_batches` micro-batches over `stages` ranks with `chunks` model chunks each
// (named errors for counts that cannot work).
std::vector<PipelineAction> pipeline_schedule(int64_t stages, int64_t rank, int64_t micro_batches, int64_t chunks,
                                              bool combined = false);

// The plain 1F1B's warm-up forwards on `rank`: min(stages - rank - 1, micro_batches).
int64_t pipeline_warmup(int64_t stages, int64_t rank, int64_t micro_batches);
// Interleaved 1F1B: the warm-up's virtual micro-batches on `rank`, and virtual micro-batch k's micro-batch and chunk in
// the forward order (`forward`) or the backward order.
int64_t interleaved_warmup(int64_t stages, int64_t rank, int64_t micro_batches, int64_t chunks, bool combined = false);
PipelineAction interleaved_action(int64_t stages, int64_t chunks, int64_t k, bool forward);

// The fraction of a step a stage idles in the ideal 1F1B pipeline (equal stage times).
double pipeline_bubble_fraction(int64_t stages, int64_t micro_batches, int64_t chunks);

}  // namespace hytra
