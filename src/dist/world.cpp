#include "dist/world.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "dist/mpi_communicator.h"

namespace hytra::dist {

World::World() : env_(launch_env_from_process()) {
  if (env_.launcher == Launcher::Torchrun) {
    const std::string id = env_.master_addr + ":" + std::to_string(env_.master_port + 1);
    setenv("NCCL_COMM_ID", id.c_str(), 0);
    return;
  }
  if (env_.world == 1) return;
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
