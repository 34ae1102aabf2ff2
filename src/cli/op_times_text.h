// Where decode time went, from a backend's operation times (Backend::op_times): each
// operation's milliseconds per step and share, and the rest: the engine's own work
// between the operations (residual adds, routing, the policy, sampling), which none of
// them counts. `bench` reports it per token, `bench --parallel` per step of N tokens.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace moeflow::cli {

// Of `seconds`, the time in none of the operations.
inline double outside_op_seconds(const std::vector<Backend::OpTime>& ops, double seconds) {
  for (const Backend::OpTime& o : ops) seconds -= o.seconds;
  return seconds;
}

// "expert_ffns 5.250 ms (65.1%), products ..., outside them 0.610 ms (7.6%)" over `steps`
// steps that took `seconds`; empty where the backend keeps no times.
inline std::string op_times_text(const std::vector<Backend::OpTime>& ops, double seconds, double steps) {
  if (ops.empty() || seconds <= 0 || steps <= 0) return "";
  std::string s;
  char buf[160];
  for (const Backend::OpTime& o : ops) {
    std::snprintf(buf, sizeof buf, "%s%s %.3f ms (%.1f%%)", s.empty() ? "" : ", ", o.op.c_str(),
                  1000.0 * o.seconds / steps, 100.0 * o.seconds / seconds);
    s += buf;
  }
  const double out = outside_op_seconds(ops, seconds);
  std::snprintf(buf, sizeof buf, ", outside them %.3f ms (%.1f%%)", 1000.0 * out / steps, 100.0 * out / seconds);
  return s + buf;
}

// The operations as JSON: [{"op", "ms_per_<unit>", "calls_per_<unit>"}].
inline nlohmann::json op_times_json(const std::vector<Backend::OpTime>& ops, double steps, const std::string& unit) {
  nlohmann::json a = nlohmann::json::array();
  for (const Backend::OpTime& o : ops)
    a.push_back({{"op", o.op},
                 {"ms_per_" + unit, 1000.0 * o.seconds / steps},
                 {"calls_per_" + unit, static_cast<double>(o.calls) / steps}});
  return a;
}

}  // namespace moeflow::cli
