// Reading a field of a JSON profile (hardware, model, platform, task files) with the
// error a user can act on: the file, the field, what was wrong.
#pragma once
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"

namespace moeflow {

// 1e-06 and 0.5, not std::to_string's 0.000001 and 0.500000 (nor 300 digits of 1e300).
inline std::string json_short_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// j[key] as a number in [lo, hi]; InputError naming `path` and the field otherwise.
inline double json_number(const nlohmann::json& j, const char* key, const std::string& path, double lo, double hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) throw InputError(path + ": field \"" + key + "\" is missing or not a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    throw InputError(path + ": field \"" + key + "\" = " + json_short_number(v) + " is outside [" +
                     json_short_number(lo) + ", " + json_short_number(hi) + "]");
  return v;
}

// j[key] as a whole number in [lo, hi] (a count: layers, experts, copy engines); 1.5
// would otherwise be cut to 1 without a word.
inline int64_t json_integer(const nlohmann::json& j, const char* key, const std::string& path, double lo, double hi) {
  const double v = json_number(j, key, path, lo, hi);
  if (v != std::floor(v))
    throw InputError(path + ": field \"" + key + "\" = " + json_short_number(v) + " must be a whole number");
  return static_cast<int64_t>(v);
}

// Every field of `j` is one of `known`, or an annotation ("description", "source",
// "comment", or a name ending in "_note"): a misspelt optional field ("chunk_kb") would
// otherwise leave its default in force without a word.
inline void json_check_fields(const nlohmann::json& j, const std::string& path, const char* kind,
                              std::initializer_list<const char*> known) {
  for (const auto& [key, value] : j.items()) {
    bool ok = key == "description" || key == "source" || key == "comment" ||
              (key.size() > 5 && key.compare(key.size() - 5, 5, "_note") == 0);
    for (const char* k : known) ok = ok || key == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    throw InputError(path + ": \"" + key + "\" is not a field of a " + kind + " profile (fields: " + list +
                     "; annotations: description, source, comment, *_note)");
  }
}

}  // namespace moeflow
