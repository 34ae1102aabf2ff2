// An activation block of 32 floats as int8: d = max|x| / 127, q = x / d rounded to
// nearest even (llama.cpp's q8_0 activations), for the kernels that multiply int8
// activations (`--activations int8`). The interleaved q4_0 / q8_0 kernels pack the
// same values with AVX-512 (rows_x4_vnni.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace moeflow::cpu {

// A block's scale d and the factor its values are multiplied by before rounding.
struct X8Scale {
  float d, inv;
};
inline X8Scale x8_scale(float amax) {
  const float d = amax / 127.0f;
  return {d, d > 0.0f ? 1.0f / d : 0.0f};
}

// Writes q[0, 32) and returns d (0 for a block of zeros, whose q are all 0).
inline float quantize_x8_block(const float* x, int8_t* q) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const X8Scale s = x8_scale(amax);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(std::clamp(std::nearbyint(x[j] * s.inv), -128.0f, 127.0f));
  return s.d;
}

}  // namespace moeflow::cpu
