// TEMP
#include "model/inspect_pattern.h"
namespace hytra { int inspect_pattern_main(int, char**, std::ostream&, std::ostream& err) { err << "todo\n"; return 1; } }
