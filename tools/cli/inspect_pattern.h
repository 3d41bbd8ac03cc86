// `hytra inspect-pattern PATTERN [flags]`: the layer plan as JSON on `out`, or the error on `err`
// with exit status 1. In the CLI library (hytra_cli) so tests can run it; hytra.cpp only forwards argv.
#pragma once
#include <ostream>

namespace hytra {

int inspect_pattern_main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace hytra
