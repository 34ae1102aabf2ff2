#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moeflow::cpu {

void rmsnorm_reference(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Accumulate in double: the reference does, and for n in the thousands the f32
  // sum of squares already differs in the 6th digit.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu_reference(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs) {
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    // Angles in double: at positions in the thousands an f32 angle loses the low bits
    // that the reference keeps.
    const double theta = static_cast<double>(pos) *
                         std::pow(static_cast<double>(freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
    cs[2 * i] = static_cast<float>(std::cos(theta));
    cs[2 * i + 1] = static_cast<float>(std::sin(theta));
  }
}

void rope_apply(float* head, int64_t rot_dim, const float* cs, bool neox) {
  const int64_t half = rot_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int64_t a = neox ? i : 2 * i;
    const int64_t b = neox ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

void rope(float* head, int64_t head_dim, int64_t rot_dim, int64_t pos, float freq_base, bool neox) {
  std::vector<float> cs(static_cast<size_t>(rot_dim / 2 * 2));
  rope_angles(pos, rot_dim, freq_base, cs.data());
  rope_apply(head, rot_dim, cs.data(), neox);
  (void)head_dim;
}

}  // namespace moeflow::cpu
