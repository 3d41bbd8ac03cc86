#include "dist/parallel_context.h"

#include "core/error.h"
#include "dist/nccl_communicator.h"

namespace hytra::dist {

ParallelContext make_parallel_context(const World& world, const ParallelSizes& sizes, bool cuda, void* compute_stream) {
  ParallelContext c;
  c.dims = ParallelDims::make(world.size(), sizes);
  c.rank = world.rank();
  const bool torchrun = world.env().launcher == Launcher::Torchrun;
  Communicator* base = world.comm();
  if (cuda && (world.size() > 1 || torchrun)) {
    c.world = nccl_communicator(world.comm(), world.rank(), world.size(), compute_stream);
    base = c.world.get();
  }
  HYTRA_CHECK(base != nullptr || world.size() == 1, "launched with ", launcher_name(world.env().launcher),
              " (world size ", world.size(),
              ") on CPUs: CPU ranks communicate through MPI (start them with mpirun "
              "or srun); torchrun-style launches train on GPUs (NCCL)");
  if (base == nullptr) return c;
  // Megatron's data-parallel group of this rank: the split's color is the group's index, its key the rank's
  // place in it.
  const RankLayout::Membership m = c.dims.dense().membership(c.rank, "dp");
  c.dp = base->split(m.group, m.position);
  if (c.dims.sizes.tp > 1) {
    const RankLayout::Membership t = c.dims.dense().membership(c.rank, "tp");
    c.tp = base->split(t.group, t.position);
  }
  if (c.dims.sizes.ep > 1) {
    const RankLayout::Membership e = c.dims.expert().membership(c.rank, "ep");
    c.ep = base->split(e.group, e.position);
    const RankLayout::Membership d = c.dims.expert().membership(c.rank, "dp");
    c.edp = base->split(d.group, d.position);
  }
  if (c.dims.sizes.pp > 1) {
    const RankLayout::Membership p = c.dims.dense().membership(c.rank, "pp");
    c.pp = base->split(p.group, p.position);
    // Every rank takes part in the split; the stages between join no group.
    const bool ends = p.position == 0 || p.position == c.dims.sizes.pp - 1;
    c.embedding = base->split(ends ? p.group : -1, p.position);
  }
  return c;
}

}  // namespace hytra::dist
