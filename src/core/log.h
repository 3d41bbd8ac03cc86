// Minimal logging to stderr: info and warnings are for people; data goes to stdout or files.
#pragma once
#include <cstdio>
#include <string>

namespace hytra {

// Off in the ranks other than 0 of a multi-process run (tools/cmd_train.cpp): people read one log. Errors are
// not logged here (they are exceptions, printed with their rank).
inline bool log_enabled = true;
inline void log_info(const std::string& msg) {
  if (log_enabled) std::fprintf(stderr, "%s\n", msg.c_str());
}
inline void log_warn(const std::string& msg) {
  if (log_enabled) std::fprintf(stderr, "warning: %s\n", msg.c_str());
}

}  // namespace hytra
