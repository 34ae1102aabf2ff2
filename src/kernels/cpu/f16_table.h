// f16 -> f32 for the kernels' block scales: one broadcast load from a table instead of
// a conversion (which on AVX2 takes a GPR-to-vector move, vcvtph2ps and a broadcast).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

namespace moeflow::cpu::detail {

// Branch-free f16 -> f32 (exact for every input, including subnormals, inf, nan).
inline float half_to_float(uint16_t h) {
  const uint32_t o = static_cast<uint32_t>(h & 0x7fffu) << 13;
  float f;
  std::memcpy(&f, &o, 4);
  f *= 5.192296858534827628530496e+33f;  // 2^112 rebias (also normalises subnormals)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((h & 0x7c00u) == 0x7c00u) u = o | 0x7f800000u;
  u |= static_cast<uint32_t>(h & 0x8000u) << 16;
  std::memcpy(&f, &u, 4);
  return f;
}

// All 65536 halves as floats (256 KiB): a block scale costs one broadcast load. The
// scales of a model sit in a narrow range, so only a few lines of it stay hot.
inline const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

}  // namespace moeflow::cpu::detail
