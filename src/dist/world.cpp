#include "dist/world.h"

#include <mpi.h>

#include "core/error.h"
#include "dist/mpi_communicator.h"

namespace hytra::dist {

World::World() : env_(launch_env_from_process()) {
  if (env_.world == 1) return;
  HYTRA_CHECK(env_.mpi(), "launched with ", launcher_name(env_.launcher), " (world size ", env_.world,
              "): multi-process runs start with mpirun or srun for now (the NCCL backend for torchrun-style "
              "launches is not built yet)");
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) {
    int provided = 0;
    HYTRA_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS, "MPI_Init failed");
    mpi_started_ = true;
  }
  comm_ = mpi_world_communicator();
  HYTRA_CHECK(comm_->size() == env_.world && comm_->rank() == env_.rank, "the MPI world (rank ", comm_->rank(), " of ",
              comm_->size(), ") differs from what ", launcher_name(env_.launcher), " set (rank ", env_.rank, " of ",
              env_.world, "): under Slurm, start each rank with srun");
}

World::~World() {
  comm_.reset();
  if (mpi_started_) MPI_Finalize();
}

void World::abort(int code) const {
  if (comm_ != nullptr) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace hytra::dist
