// hytra: the command-line entry point. `hytra <subcommand> [flags]`; every error reaches the user
// as one clear line ("hytra <subcommand>: error: ...") and a non-zero exit status.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "core/error.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Subcommand kCommands[] = {
    {"train", hytra::cmd_train, "train a model (Megatron-LM flags, --config FILE)"},
    {"inspect-pattern", hytra::cmd_inspect_pattern, "print the layer plan of a hybrid pattern as JSON"},
    {"inspect-checkpoint", hytra::cmd_inspect_checkpoint, "list a checkpoint's manifest and tensors"},
    {"eval-step", hytra::cmd_eval_step, "one forward/backward of a checkpoint on a batch: losses and gradients"},
    {"convert", hytra::cmd_convert, "a checkpoint to a Hugging Face folder (--to-hf) and back (--from-hf)"},
    {"generate", hytra::cmd_generate, "continue a prompt with a trained model (KV cache, recurrent states)"},
    {"bench", hytra::cmd_bench, "train a named config for N steps: tokens/s, TFLOP/s, MFU, peak memory"},
    {"ops", hytra::cmd_ops, "list the ops and the backends that implement them"},
    {"preprocess", hytra::cmd_preprocess, "tokenize JSON Lines or text into Megatron .bin/.idx files"},
    {"inspect-data", hytra::cmd_inspect_data, "describe a .bin/.idx dataset, or the samples --data-path yields"},
};

int usage(FILE* out) {
  std::fprintf(out, "usage: hytra <subcommand> [flags]   (hytra <subcommand> --help for its flags)\n\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-16s %s\n", c.name, c.help);
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the writer reports
  // naming the file, instead of the signal killing the process mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) return usage(stderr);
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) return usage(stdout);
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hytra %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "hytra: unknown subcommand '%s'\n\n", argv[1]);
  return usage(stderr);
}
