// Which launcher's variables name this process's rank (torchrun > Open MPI > PMI > Slurm > one process) and
// the errors for malformed or inconsistent ones.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/error_of.h"
#include "dist/launch.h"

namespace hytra::dist {
namespace {

using test::error_of;

LaunchEnv resolve(const std::map<std::string, std::string>& vars) {
  return resolve_launch_env([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, NoLauncherIsOneProcess) {
  const LaunchEnv e = resolve({});
  EXPECT_EQ(e.launcher, Launcher::Single);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world, 1);
  EXPECT_FALSE(e.mpi());
}

TEST(Launch, TorchrunVariablesWinAndDefaultTheRendezvous) {
  const LaunchEnv e = resolve({{"RANK", "3"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_RANK", "0"},
                               {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(e.launcher, Launcher::Torchrun);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world, 4);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.mpi());
  const LaunchEnv m = resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "6000"}});
  EXPECT_EQ(m.master_addr, "node7");
  EXPECT_EQ(m.master_port, 6000);
}

TEST(Launch, MpiAndSlurmVariables) {
  const LaunchEnv o = resolve({{"OMPI_COMM_WORLD_RANK", "1"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"SLURM_PROCID", "0"},
                               {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(o.launcher, Launcher::OpenMpi);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world, 4);
  EXPECT_EQ(o.local_world, 2);
  EXPECT_TRUE(o.mpi());
  const LaunchEnv p = resolve({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}});
  EXPECT_EQ(p.launcher, Launcher::Pmi);
  EXPECT_EQ(p.rank, 2);
  const LaunchEnv s = resolve(
      {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4(x2)"}});
  EXPECT_EQ(s.launcher, Launcher::Slurm);
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
}

TEST(Launch, MalformedVariablesAreNamed) {
  std::string e = error_of([] { resolve({{"RANK", "x"}, {"WORLD_SIZE", "2"}}); });
  EXPECT_NE(e.find("RANK=\"x\""), std::string::npos) << e;
  e = error_of([] { resolve({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); });
  EXPECT_NE(e.find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos) << e;
  e = error_of([] { resolve({{"RANK", "0"}}); });
  EXPECT_NE(e.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << e;
  e = error_of([] { resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}); });
  EXPECT_NE(e.find("MASTER_PORT"), std::string::npos) << e;
  e = error_of([] { resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65535"}}); });
  EXPECT_NE(e.find("MASTER_PORT=65535: expected a port number (1..65534"), std::string::npos) << e;
  e = error_of([] { resolve({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}); });
  EXPECT_NE(e.find("OMPI_COMM_WORLD_SIZE=\"0\""), std::string::npos) << e;
}

}  // namespace
}  // namespace hytra::dist
