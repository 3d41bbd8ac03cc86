// The MPI backend of the communicator (CPU tensors): Open MPI or any MPI-3 library.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace hytra::dist {

// MPI_COMM_WORLD's communicator (MPI must be initialised).
std::unique_ptr<Communicator> mpi_world_communicator();

}  // namespace hytra::dist
