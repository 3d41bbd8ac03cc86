// TEMP
#pragma once
#include <ostream>
namespace hytra { int inspect_pattern_main(int argc, char** argv, std::ostream& out, std::ostream& err); }
