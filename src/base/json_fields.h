// Reading a field of a JSON profile (hardware, model, platform, task files) with the
// error a user can act on: the file, the field, what was wrong.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"

namespace moeflow {

// j[key] as a number in [lo, hi]; InputError naming `path` and the field otherwise.
inline double json_number(const nlohmann::json& j, const char* key, const std::string& path, double lo, double hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) throw InputError(path + ": field \"" + key + "\" is missing or not a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    throw InputError(path + ": field \"" + key + "\" = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace moeflow
