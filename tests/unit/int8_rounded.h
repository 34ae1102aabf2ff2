// An activation as the int8 kernels see it, for their tests: each block of N columns (32,
// or 256: int8_avx2.h's grid of the k-quants) rounded to int8 (quantize_x8) times its scale.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/quantize_x8.h"

namespace moeflow::testing {

template <int N = 32>
inline std::vector<float> int8_rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  int8_t q[N];
  for (size_t b = 0; b < x.size(); b += N) {
    const float d = cpu::quantize_x8<N>(x.data() + b, q);
    for (int j = 0; j < N; ++j) r[b + j] = d * static_cast<float>(q[j]);
  }
  return r;
}

}  // namespace moeflow::testing
