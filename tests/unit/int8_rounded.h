// An activation as the int8 kernels see it, for their tests: each block of 32 rounded to
// int8 (quantize_x8_block) times its scale.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/quantize_x8.h"

namespace moeflow::testing {

inline std::vector<float> int8_rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  int8_t q[32];
  for (size_t b = 0; b < x.size(); b += 32) {
    const float d = cpu::quantize_x8_block(x.data() + b, q);
    for (int j = 0; j < 32; ++j) r[b + j] = d * static_cast<float>(q[j]);
  }
  return r;
}

}  // namespace moeflow::testing
