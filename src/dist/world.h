// This process's place in a job: the launch environment and the world communicator. Made once in the
// program's main (the tools), which hands its communicators down; nothing here is a global the library
// reads. Under an MPI launcher (mpirun, srun) the world is MPI's (CPU tensors, and the bootstrap of NCCL);
// a torchrun-style launch has no MPI world (NCCL alone, through NCCL_COMM_ID); a single process has none.
#pragma once
#include <memory>

#include "dist/communicator.h"
#include "dist/launch.h"

namespace hytra::dist {

class World {
 public:
  // Reads the launch environment and, under an MPI launcher with more than one rank, starts MPI and checks
  // that its world matches the environment's. Under a torchrun-style launch it sets NCCL_COMM_ID to
  // MASTER_ADDR:MASTER_PORT + 1 (torchrun's own store holds MASTER_PORT) unless it is set.
  World();
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  const LaunchEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  int size() const { return env_.world; }
  // The communicator of every rank; nullptr in a single process.
  Communicator* comm() const { return comm_.get(); }
  // Ends every rank of the job now (after an error on this one): MPI_Abort under MPI; without MPI (a
  // torchrun-style launch) this process exits at once and its launcher ends the others. Returns only in a
  // single process.
  void abort(int code) const;

 private:
  LaunchEnv env_;
  bool mpi_started_ = false;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace hytra::dist
