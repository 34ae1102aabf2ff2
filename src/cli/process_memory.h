// Peak and current resident memory of this process, from /proc/self/status (Linux);
// 0 where unavailable. Used to prove that a budgeted run stays within its budget.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace moeflow::cli {

inline uint64_t proc_status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line))
    if (line.compare(0, k.size(), k) == 0) return std::stoull(line.substr(k.size()));
  return 0;
}

inline uint64_t peak_rss_bytes() { return proc_status_kib("VmHWM") * 1024; }

}  // namespace moeflow::cli
