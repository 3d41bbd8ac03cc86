// `hytra eval-step [model flags] --load CKPT --batch FILE --out OUT.safetensors` (cli/eval_step.h).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "cli/eval_step.h"
#include "cli/flags.h"

namespace hytra {

int cmd_eval_step(int argc, char** argv) {
  std::vector<std::string> args;
  std::string batch, out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" || a == "--out") {
      HYTRA_CHECK(i + 1 < argc, a, ": expected a file name");
      (a == "--batch" ? batch : out) = argv[++i];
    } else {
      args.push_back(a);
    }
  }
  // The model flags are `hytra train`'s; the run needs no data, so synthetic data stands in.
  bool has_data = false;
  for (const auto& a : args) has_data |= a == "--mock-data" || a == "--data-path";
  if (!has_data) args.push_back("--mock-data");
  for (const char* f : {"--micro-batch-size", "--train-iters", "--lr"})
    if (std::find(args.begin(), args.end(), f) == args.end()) args.insert(args.end(), {f, "1"});
  ModelConfig m;
  TrainConfig t;
  std::string help;
  if (!parse_train_args(args, m, t, &help)) {
    std::cout << "usage: hytra eval-step [model flags as for train] --load CKPT --batch FILE --out OUT\n" << help;
    return 0;
  }
  if (batch.empty() || out.empty()) throw Error("--batch FILE and --out OUT.safetensors are required");
  eval_step(m, t, batch, out);
  std::cout << "wrote " << out << "\n";
  return 0;
}

}  // namespace hytra
