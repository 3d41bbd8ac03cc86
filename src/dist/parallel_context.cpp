#include "dist/parallel_context.h"

#include <algorithm>

namespace hytra::dist {

ParallelContext make_parallel_context(Communicator* world, const ParallelSizes& sizes) {
  ParallelContext c;
  c.dims = ParallelDims::make(world != nullptr ? world->size() : 1, sizes);
  if (world == nullptr) return c;
  c.rank = world->rank();
  if (c.dims.dp > 1) {
    // Megatron's data-parallel group of this rank; the split's color is the group's index, its key the
    // rank's place in it.
    const auto groups = c.dims.dense().groups("dp");
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto it = std::find(groups[g].begin(), groups[g].end(), c.rank);
      if (it != groups[g].end()) c.dp = world->split(int(g), int(it - groups[g].begin()));
    }
  }
  return c;
}

}  // namespace hytra::dist
