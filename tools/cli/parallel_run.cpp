#include "cli/parallel_run.h"

#include <cstdio>
#include <iostream>
#include <streambuf>

#include "core/device.h"
#include "ops/exec.h"

namespace hytra {

dist::ParallelContext make_run_context(const dist::World& world, TrainConfig& train) {
  const bool cuda = train.device == DeviceChoice::CUDA || (train.device == DeviceChoice::Auto && cuda_available());
  // A GPU run of several ranks (or a torchrun-style one) takes its local rank's GPU before any CUDA work.
  if (cuda && (world.size() > 1 || world.env().launcher == dist::Launcher::Torchrun))
    cuda_select_device(world.env().local_rank, world.env().local_world);
  dist::ParallelContext par = dist::make_parallel_context(
      world,
      {train.tensor_model_parallel_size, train.pipeline_model_parallel_size, train.context_parallel_size,
       train.expert_model_parallel_size, train.expert_tensor_parallel_size},
      cuda, cuda ? Exec::for_device(Device::CUDA).stream() : nullptr);
  train.data_parallel_size = par.dp_size();
  return par;
}

namespace {
// A stream buffer that drops what it is given.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};
}  // namespace

std::ostream& rank_log(const dist::World& world) {
  static NullBuffer null_buffer;
  static std::ostream null_log(&null_buffer);
  return world.rank() == 0 ? std::cout : null_log;
}

int run_ranks(const char* command, dist::World& world, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;
    std::cout << std::flush;
    std::fprintf(stderr, "hytra %s: rank %d: error: %s\n", command, world.rank(), e.what());
    std::fflush(stderr);
    world.abort(1);
    return 1;
  }
}

}  // namespace hytra
