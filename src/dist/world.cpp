#include "dist/world.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "dist/mpi_communicator.h"

namespace hytra::dist {

World::World() : env_(launch_env_from_process()) {
  if (env_.launcher == Launcher::Torchrun) {
    const bool ipv6 = env_.master_addr.find(':') != std::string::npos && env_.master_addr.front() != '[';
    const std::string host = ipv6 ? "[" + env_.master_addr + "]" : env_.master_addr;
    const std::string id = host + ":" + std::to_string(env_.master_port + 1);
    setenv("NCCL_COMM_ID", id.c_str(), 0);
    return;
  }
  if (env_.world == 1) return;
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) {
    int provided = 0;
    HYTRA_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
                "MPI_Init_thread failed");
    HYTRA_CHECK(provided >= MPI_THREAD_FUNNELED,
                "MPI_Init_thread: the MPI library does not support "
                "MPI_THREAD_FUNNELED (hytra's CPU kernels run threads; only the main thread calls MPI)");
    mpi_started_ = true;
  }
  comm_ = mpi_world_communicator();
  if (env_.launcher == Launcher::Slurm && comm_->size() == 1) {
    // Slurm's variables describe the allocation, but srun did not start this process (a command in an
    // sbatch script): it is one process.
    log_warn(str("SLURM_NTASKS=", env_.world,
                 " but this process was not started by srun: training as one "
                 "process (start every rank with srun for a multi-process run)"));
    comm_.reset();
    env_ = LaunchEnv{};
    return;
  }
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
  if (env_.world > 1) std::_Exit(code);  // no destructors: NCCL teardown could wait for the other ranks
}

}  // namespace hytra::dist
