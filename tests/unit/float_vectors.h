// Random inputs and their comparison, for the kernel tests: uniform floats in [-1, 1),
// and the relative root-mean-square error sqrt(sum (y - ref)^2 / sum ref^2) (the plain
// RMS error where ref is all zeros).
#pragma once
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace moeflow::testing {

inline std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = uni(rng);
  return v;
}

inline double rel_err(const float* y, const float* ref, size_t n) {
  double se = 0, sr = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(y[i]) - ref[i];
    se += e * e;
    sr += static_cast<double>(ref[i]) * ref[i];
  }
  return sr == 0 ? std::sqrt(se) : std::sqrt(se / sr);
}
inline double rel_err(const std::vector<float>& y, const std::vector<float>& ref) {
  return rel_err(y.data(), ref.data(), ref.size());
}

}  // namespace moeflow::testing
