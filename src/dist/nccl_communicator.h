// The NCCL backend of the communicator (CUDA tensors, docs/parallelism.md). Each communicator has its own
// CUDA stream: an operation waits for the work queued so far on the compute stream, runs on its stream, and
// the compute stream waits for it, so callers see stream order as with any kernel. Deterministic: NCCL_ALGO
// Ring and NCCL_PROTO Simple unless the environment chose otherwise.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace hytra::dist {

// A communicator over `size` ranks, this process being `rank`; the ranks exchange NCCL's unique id through
// `bootstrap` (the MPI world; nullptr: one rank, or NCCL_COMM_ID set alike on every rank, which
// torchrun-style launches get from MASTER_ADDR and MASTER_PORT + 1). compute_stream: the cudaStream_t the
// model's kernels run on. The GPU must be selected (cuda_select_device) first.
std::unique_ptr<Communicator> nccl_communicator(Communicator* bootstrap, int rank, int size, void* compute_stream);

}  // namespace hytra::dist
