// Minimal logging to stderr: info and warnings are for people; data goes to stdout or files.
#pragma once
#include <cstdio>
#include <string>

namespace hytra {

inline void log_info(const std::string& msg) { std::fprintf(stderr, "%s\n", msg.c_str()); }
inline void log_warn(const std::string& msg) { std::fprintf(stderr, "warning: %s\n", msg.c_str()); }

}  // namespace hytra
