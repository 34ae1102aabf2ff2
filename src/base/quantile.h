// The q-quantile of sorted values, interpolating linearly between order statistics
// (Hyndman and Fan's type 7, numpy's default): the convention every report of this
// project uses for p50/p90/p99. REQUIRES sorted ascending, 0 <= q <= 1; empty: 0.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

namespace moeflow {

inline double quantile_of_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = lo + 1 < sorted.size() ? lo + 1 : sorted.size() - 1;
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace moeflow
