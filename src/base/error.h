// Base of every stage. Errors from outside input (model files, flags, traces) are thrown as
// moeflow::InputError with a message that names the file, the field and, where it
// applies, the byte offset, so the user can tell what to fix.
#pragma once
#include <stdexcept>
#include <string>

namespace moeflow {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace moeflow
