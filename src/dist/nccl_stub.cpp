// The NCCL backend in a build without CUDA: asking for it is an error.
#include "core/error.h"
#include "dist/nccl_communicator.h"

namespace hytra::dist {

std::unique_ptr<Communicator> nccl_communicator(Communicator*, int, int, void*) {
  fail("this hytra build has no CUDA backend, so no NCCL (configure with -DHYTRA_CUDA=ON on a machine with CUDA)");
}

}  // namespace hytra::dist
