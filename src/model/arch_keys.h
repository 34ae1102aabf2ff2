// One architecture's metadata keys ("<arch>.<key>"), read with bounds: a missing
// required key, a value out of range or of the wrong type is an InputError naming the
// file and the key.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "format/gguf.h"

namespace moeflow {

struct ArchKeys {
  const gguf::GgufFile& f;
  std::string p;  // "deepseek2."

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(f.path() + ": key " + p + key + " " + what);
  }
  int64_t integer(const std::string& key, int64_t dflt, int64_t lo, int64_t hi) const {
    const gguf::Value* v = f.find(p + key);
    const int64_t x = v ? v->as_int(p + key) : dflt;
    if (x < lo || x > hi)
      fail(key, "= " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  int64_t required(const std::string& key, int64_t lo, int64_t hi) const {
    if (!f.find(p + key)) fail(key, "is missing (required by " + p.substr(0, p.size() - 1) + ")");
    return integer(key, 0, lo, hi);
  }
  double real(const std::string& key, double dflt, double lo, double hi) const {
    const gguf::Value* v = f.find(p + key);
    const double x = v ? v->as_float(p + key) : dflt;
    if (!std::isfinite(x) || x < lo || x > hi)
      fail(key, "= " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  bool boolean(const std::string& key, bool dflt) const {
    const gguf::Value* v = f.find(p + key);
    return v ? v->as_bool(p + key) : dflt;
  }
};

}  // namespace moeflow
