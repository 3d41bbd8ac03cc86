// Errors: one exception type carrying a clear, user-facing message.
// HYTRA_CHECK(cond, msg...) throws hytra::Error("file:line: msg") when cond is false; the
// message pieces are streamed, so callers can name the flag, file or key and the bad value.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace hytra {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from streamable pieces: str("expected ", 3, ", got ", x).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

}  // namespace hytra

// User-facing check: the message must make sense without the source location.
#define HYTRA_CHECK(cond, ...)                                     \
  do {                                                             \
    if (!(cond)) ::hytra::fail(::hytra::str(__VA_ARGS__));         \
  } while (0)

// Internal invariant: a failure is a hytra bug, so the location is included.
#define HYTRA_ASSERT(cond, ...)                                                      \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::hytra::fail(::hytra::str(__FILE__, ":", __LINE__, ": internal error: ", #cond, \
                                 " ", ##__VA_ARGS__));                               \
  } while (0)
