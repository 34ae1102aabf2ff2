// What adaptive.cpp and adaptive_similarity.cpp share (internal to the policy).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace moeflow::adaptive_detail {

// The similarity and trajectory tables correct p by a ratio instead of replacing it by
// the cell's mean: a cell counts hits and the hits p expected (the sum of p over its
// observations), and p becomes p * (hits + 1) / (expected + 1). A cell spans a range of
// p, and a mean would erase the first table's ranking inside it (a signal that says
// nothing new then costs hits); the ratio keeps it, and is 1 for such a signal. One
// pseudo-hit keeps a rarely seen cell near 1.
inline constexpr double kRatioPrior = 1.0;

// The running requests' rate is small for most experts (FLAME: 6 of 64 per token):
// finer buckets at the low end.
inline int request_bucket(double rate) {
  static constexpr double kEdges[] = {0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7};
  int b = 0;
  while (b < 7 && rate >= kEdges[b]) ++b;
  return b;
}

inline double cosine(const std::vector<int32_t>& a, const std::vector<int32_t>& b, double norm_b) {
  double dot = 0, na = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    na += static_cast<double>(a[i]) * static_cast<double>(a[i]);
  }
  return na > 0 && norm_b > 0 ? dot / (std::sqrt(na) * norm_b) : 0;
}

inline double norm_of(const std::vector<int32_t>& v) {
  double n = 0;
  for (int32_t x : v) n += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(n);
}

}  // namespace moeflow::adaptive_detail
