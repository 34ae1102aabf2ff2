// The default thread count: every hardware thread the system reports, at least one.
#pragma once
#include <algorithm>
#include <thread>

namespace moeflow {

inline int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace moeflow
