// The message of the hytra::Error that f() throws, or "" when it throws none (so a test that looks
// for a needle in it fails either way).
#pragma once
#include <string>

#include "core/error.h"

namespace hytra::test {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace hytra::test
