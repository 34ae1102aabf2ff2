// An activation block of 32 floats as int8: d = max|x| / 127, q = x / d rounded to
// nearest even (llama.cpp's q8_0 activations), for the kernels that multiply int8
// activations (`--activations int8`). The VNNI kernels' packings compute the same
// values with AVX-512 (quantize_x8_block_avx512).
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

// Writes q[0, N) and returns d (0 for a block of zeros, whose q are all 0). N = 256 is
// llama.cpp's q8_K grid, one scale per k-quant super-block (int8_avx2.h).
template <int N>
inline float quantize_x8(const float* x, int8_t* q) {
  float amax = 0;
  for (int j = 0; j < N; ++j) amax = std::max(amax, std::fabs(x[j]));
  const X8Scale s = x8_scale(amax);
  for (int j = 0; j < N; ++j) q[j] = static_cast<int8_t>(std::clamp(std::nearbyint(x[j] * s.inv), -128.0f, 127.0f));
  return s.d;
}
inline float quantize_x8_block(const float* x, int8_t* q) { return quantize_x8<32>(x, q); }

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
// quantize_x8_block with AVX-512 (for the VNNI kernel files, which include
// vnni_target.h first): the same d, and the values as two vectors of 16 int32 (the
// elements in order; each fits int8).
struct X8BlockAvx512 {
  __m512i q0, q1;
  float d;
};
MOEFLOW_VNNI_ATTR inline X8BlockAvx512 quantize_x8_block_avx512(const float* x) {
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const X8Scale s = x8_scale(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))));
  const __m512 inv = _mm512_set1_ps(s.inv);
  return {_mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv)), s.d};
}
#endif

}  // namespace moeflow::cpu
