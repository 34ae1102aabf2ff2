// Little helpers for the binary policy states (save/load): raw values in host byte
// order, with truncation reported as an InputError naming the state being read.
#pragma once
#include <cstdint>
#include <istream>
#include <ostream>
#include <string>

#include "base/error.h"

namespace moeflow::binio {

template <class T>
void put(std::ostream& o, const T& v) {
  o.write(reinterpret_cast<const char*>(&v), sizeof v);
}

// Bytes left between the stream's position and its end, or UINT64_MAX when the stream
// cannot tell (not seekable). Loaders compare a header's claimed payload with this
// before allocating, so a 28-byte file cannot make them allocate gigabytes.
inline uint64_t bytes_left(std::istream& in) {
  const std::istream::pos_type here = in.tellg();
  if (here == std::istream::pos_type(-1)) return UINT64_MAX;
  in.seekg(0, std::ios::end);
  const std::istream::pos_type end = in.tellg();
  in.seekg(here);
  if (end == std::istream::pos_type(-1) || end < here) return UINT64_MAX;
  return static_cast<uint64_t>(end - here);
}

// Throws unless `bytes` more can be read; `what` names the state and the part.
inline void need(std::istream& in, uint64_t bytes, const std::string& what) {
  const uint64_t left = bytes_left(in);
  if (bytes > left)
    throw InputError(what + ": truncated (needs " + std::to_string(bytes) + " more bytes, the file has " +
                     std::to_string(left) + ")");
}

template <class T>
T get(std::istream& in, const std::string& what) {
  T v{};
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) throw InputError(what + ": truncated (the file ends early)");
  return v;
}

}  // namespace moeflow::binio
