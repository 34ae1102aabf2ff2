// Little helpers for the binary policy states (save/load): raw values in host byte
// order, with truncation reported as an InputError naming the state being read.
#pragma once
#include <istream>
#include <ostream>
#include <string>

#include "base/error.h"

namespace moeflow::binio {

template <class T>
void put(std::ostream& o, const T& v) {
  o.write(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(std::istream& in, const std::string& what) {
  T v{};
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) throw InputError(what + ": truncated (the file ends early)");
  return v;
}

}  // namespace moeflow::binio
