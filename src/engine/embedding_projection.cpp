#include "engine/embedding_projection.h"

#include <cmath>

namespace moeflow {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

int projection_sign(int64_t i, int64_t j) {
  return (mix((static_cast<uint64_t>(i) << 32) ^ static_cast<uint64_t>(j)) >> 63) ? -1 : 1;
}

std::vector<float> project_embedding(const std::vector<float>& x, int64_t n_out) {
  const auto width = static_cast<int64_t>(x.size());
  if (n_out >= width) return x;
  std::vector<float> y(static_cast<size_t>(n_out), 0.0f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n_out));
  for (int64_t i = 0; i < n_out; ++i) {
    double s = 0;
    for (int64_t j = 0; j < width; ++j) s += projection_sign(i, j) * static_cast<double>(x[static_cast<size_t>(j)]);
    y[static_cast<size_t>(i)] = static_cast<float>(s * scale);
  }
  return y;
}

}  // namespace moeflow
