// hytra: the command-line entry point. Dispatches `hytra <subcommand> [flags]`.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::printf("usage: hytra <train|inspect-pattern|ops|bench> [flags]\n");
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "hytra: unknown subcommand '%s'\n", argv[1]);
  return 2;
}
