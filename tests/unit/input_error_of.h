// The message of the InputError that f() throws, or "" when it throws none: for tests
// that check what a bad input's error names.
#pragma once
#include <string>

#include "base/error.h"

namespace moeflow::testing {

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace moeflow::testing
