// `hytra bench NAME|FILE [--warmup W] [--steps N] [--skew-routing] [training flags]`: trains a named config
// (bench/configs/NAME.yaml, or a config file) on its data (mock tokens in the bundled configs) for
// W warm-up and N measured steps, then prints the config's size and one record line
// (cli/bench.h). Any training flag after the name overrides the file. Launched as several ranks (data-parallel
// and pipeline; mpirun, srun, torchrun-style), every rank trains and rank 0 prints (gpus= the ranks; TFLOP/s and
// MFU per rank).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench.h"
#include "cli/flag_table.h"
#include "cli/flags.h"
#include "cli/parallel_run.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"

namespace hytra {
namespace {

std::string config_path(const std::string& name) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(name)) return name;
  const std::string bundled = "bench/configs/" + name + ".yaml";
  HYTRA_CHECK(fs::is_regular_file(bundled), "bench: no config file '", name, "' and no bundled config '", bundled,
              "' (run from the repository root, or pass a config file path)");
  return bundled;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: hytra bench NAME|FILE [--warmup W (default 3)] [--steps N (default 10)] [--skew-routing]\n"
                 "                   [training flags]\n"
                 "  NAME is a file under bench/configs/ without .yaml (e.g. llama3.2-1b)\n"
                 "  --skew-routing: expert 0's router expert bias starts at 1 in every MoE layer (every token\n"
                 "  routes one of its top-k choices to it)\n";
    return args.empty() ? 2 : 0;
  }
  const std::string name = args[0];
  int64_t warmup = 3, steps = 10;
  bool skew = false;
  std::vector<std::string> rest = {"--config", config_path(name)};
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--skew-routing") {
      skew = true;
    } else if (args[i] == "--warmup" || args[i] == "--steps") {
      HYTRA_CHECK(i + 1 < args.size(), args[i], ": expected a count after it");
      (args[i] == "--warmup" ? warmup : steps) = parse_int_value(args[i], args[i + 1]);
      ++i;
    } else {
      overrides.push_back(args[i]);
    }
  }
  check_bench_counts(warmup, steps);  // before --train-iters is derived from them
  rest.push_back("--train-iters");    // the bench decides the length; flags given after the name still win
  rest.push_back(std::to_string(warmup + steps));
  rest.insert(rest.end(), overrides.begin(), overrides.end());
  dist::World world;  // one process, mpirun/srun ranks, or a torchrun-style world (then NCCL even for one rank)
  log_enabled = world.rank() == 0;
  std::unique_ptr<dist::ParallelContext> par;  // outlives an error (cli/parallel_run.h)
  return run_ranks("bench", world, [&] {
    ModelConfig model;
    TrainConfig train;
    parse_train_flags(rest, model, train, nullptr);
    par = std::make_unique<dist::ParallelContext>(make_run_context(world, train));
    resolve_train_config(model, train);
    if (skew) train.after_init = skew_routing;
    // The record's name: the file stem, or its folder for examples/<name>/config.yaml.
    const std::filesystem::path path(name);
    std::string label = path.filename().string();  // not stem(): "llama3.2-1b" has a dot
    if (label.size() > 5 && label.ends_with(".yaml")) label.resize(label.size() - 5);
    if (label == "config" && path.has_parent_path()) label = path.parent_path().filename().string();
    std::ostream& out = rank_log(world);
    BenchResult r = run_bench(label, model, train, warmup, steps, out, par.get());
    out << "hytra bench: " << r.num_params << " parameters, " << r.flops_per_token / 1e9
        << " GFLOP per token (docs/configuration.md, model FLOPs), " << steps << " measured steps after " << warmup
        << " warm-up\n"
        << format_bench_record(r) << "\n";
    return 0;
  });
}

}  // namespace hytra
