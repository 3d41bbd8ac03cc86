#include "dist/launch.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace hytra::dist {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::Single: return "single process";
    case Launcher::Torchrun: return "torchrun-style environment";
    case Launcher::OpenMpi: return "Open MPI";
    case Launcher::Pmi: return "PMI (MPICH / Intel MPI)";
    case Launcher::Slurm: return "Slurm";
  }
  return "?";
}

namespace {

int parse_int(const char* name, const char* v, int lo) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  HYTRA_CHECK(end != v && *end == '\0' && errno == 0 && x >= lo && x <= (1L << 30), "environment variable ", name,
              "=\"", v, "\": expected an integer of at least ", lo);
  return int(x);
}

// One launcher's variables: rank and size (both set, or neither), local rank and local size (optional).
bool read(const std::function<const char*(const char*)>& get, Launcher l, const char* rank, const char* size,
          const char* local_rank, const char* local_size, LaunchEnv& env) {
  const char* r = get(rank);
  const char* s = get(size);
  if (r == nullptr && s == nullptr) return false;
  HYTRA_CHECK(r != nullptr && s != nullptr, "environment: ", r != nullptr ? rank : size, " is set but ",
              r != nullptr ? size : rank, " is not (", launcher_name(l), ")");
  env.launcher = l;
  env.rank = parse_int(rank, r, 0);
  env.world = parse_int(size, s, 1);
  HYTRA_CHECK(env.rank < env.world, "environment: ", rank, "=", env.rank, " is not below ", size, "=", env.world);
  const char* lr = local_rank != nullptr ? get(local_rank) : nullptr;
  const char* ls = local_size != nullptr ? get(local_size) : nullptr;
  env.local_rank = lr != nullptr ? parse_int(local_rank, lr, 0) : 0;
  env.local_world = ls != nullptr ? parse_int(local_size, ls, 1) : 1;
  if (ls != nullptr)
    HYTRA_CHECK(env.local_rank < env.local_world, "environment: ", local_rank, "=", env.local_rank, " is not below ",
                local_size, "=", env.local_world);
  return true;
}

}  // namespace

LaunchEnv resolve_launch_env(const std::function<const char*(const char*)>& get) {
  LaunchEnv env;
  if (read(get, Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", env)) {
    const char* addr = get("MASTER_ADDR");
    const char* port = get("MASTER_PORT");
    env.master_addr = addr != nullptr ? addr : "127.0.0.1";
    env.master_port = port != nullptr ? parse_int("MASTER_PORT", port, 1) : 29500;
    // NCCL's bootstrap takes MASTER_PORT + 1 (torchrun's own store holds MASTER_PORT).
    HYTRA_CHECK(env.master_port <= 65534, "environment variable MASTER_PORT=", env.master_port,
                ": expected a port number (1..65534; hytra's NCCL bootstrap listens on the next one)");
    return env;
  }
  if (read(get, Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           "OMPI_COMM_WORLD_LOCAL_SIZE", env))
    return env;
  if (read(get, Launcher::Pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", env)) return env;
  // SLURM_NTASKS_PER_NODE may read "2(x3)": the local size is left at 1.
  if (read(get, Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, env)) return env;
  return env;
}

LaunchEnv launch_env_from_process() {
  return resolve_launch_env([](const char* name) { return std::getenv(name); });
}

}  // namespace hytra::dist
