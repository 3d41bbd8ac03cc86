// `hytra inspect-pattern`: a thin wrapper over model/inspect_pattern (kept in the library for tests).
#include <iostream>

#include "commands.h"
#include "model/inspect_pattern.h"

namespace hytra {

int cmd_inspect_pattern(int argc, char** argv) { return inspect_pattern_main(argc, argv, std::cout, std::cerr); }

}  // namespace hytra
