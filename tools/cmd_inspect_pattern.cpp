// `hytra inspect-pattern`: a thin wrapper over cli/inspect_pattern (in hytra_cli, for tests).
#include <iostream>

#include "commands.h"
#include "cli/inspect_pattern.h"

namespace hytra {

int cmd_inspect_pattern(int argc, char** argv) { return inspect_pattern_main(argc, argv, std::cout, std::cerr); }

}  // namespace hytra
