// Minimal logging to stderr: debug notes, info and warnings are for people; data goes to stdout or files.
#pragma once
#include <cstdio>
#include <ostream>
#include <string>

namespace hytra {

// Off in the ranks other than 0 of a multi-process run (tools/cmd_train.cpp): people read one log. Errors are
// not logged here (they are exceptions, printed with their rank).
inline bool log_enabled = true;
// Megatron's --logging-level, in Python's levels (10 debug, 20 info, 30 warning, 40 error): a note prints when its
// level is at least this. The training and validation lines are not notes: they always print, as Megatron's do.
inline int log_level = 20;
inline bool log_shows(int level) { return log_enabled && level >= log_level; }

inline void log_debug(const std::string& msg) {
  if (log_shows(10)) std::fprintf(stderr, "%s\n", msg.c_str());
}
inline void log_info(const std::string& msg) {
  if (log_shows(20)) std::fprintf(stderr, "%s\n", msg.c_str());
}
inline void log_warn(const std::string& msg) {
  if (log_shows(30)) std::fprintf(stderr, "warning: %s\n", msg.c_str());
}
// Where info-level progress bars draw: stderr, or nowhere when info notes do not show.
inline std::FILE* info_file() { return log_shows(20) ? stderr : nullptr; }
// `out` when info notes show, else a stream that drops what is written to it (the trainer's "hytra: ..." notes).
std::ostream& info_stream(std::ostream& out);

}  // namespace hytra
