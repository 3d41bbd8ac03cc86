// Who this process is in a multi-process job, read from the environment its launcher set
// (docs/parallelism.md): torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) first, then Open MPI's (OMPI_COMM_WORLD_*), MPICH/Hydra's (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID, MPI_LOCALNRANKS), then Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); none of them:
// one process.
#pragma once
#include <functional>
#include <string>

namespace hytra::dist {

enum class Launcher { Single, Torchrun, OpenMpi, Pmi, Slurm };
const char* launcher_name(Launcher l);

struct LaunchEnv {
  Launcher launcher = Launcher::Single;
  int rank = 0, world = 1;
  int local_rank = 0, local_world = 1;
  std::string master_addr;  // torchrun: MASTER_ADDR (default 127.0.0.1)
  int master_port = 0;      // torchrun: MASTER_PORT (default 29500)
  // Launched by an MPI launcher (mpirun, or srun with its PMI): MPI can start the world.
  bool mpi() const { return launcher == Launcher::OpenMpi || launcher == Launcher::Pmi || launcher == Launcher::Slurm; }
};

// `get(name)`: the variable's value, or nullptr when unset. A malformed or inconsistent value is an error
// naming the variable.
LaunchEnv resolve_launch_env(const std::function<const char*(const char*)>& get);
// The same from the process environment.
LaunchEnv launch_env_from_process();

}  // namespace hytra::dist
