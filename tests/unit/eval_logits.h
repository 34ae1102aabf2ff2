// Every position's logits of a prompt evaluated in one block (a 64-position f32 cache,
// no thread pool), and how far two such differ: how the loader tests compare two forms
// of one model.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/transformer.h"

namespace moeflow::testing {

inline std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& tokens) {
  Transformer tf(m, nullptr, 64, DType::F32);
  std::vector<float> logits;
  tf.eval(tokens.data(), static_cast<int64_t>(tokens.size()), true, logits);
  return logits;
}

// The largest relative change (L2) of one position's logits from b's to a's: how far a
// variant of a model moves its output.
inline double max_rel_change(const std::vector<float>& a, const std::vector<float>& b, int64_t n_vocab) {
  double worst = 0;
  for (size_t r = 0; r * static_cast<size_t>(n_vocab) < a.size(); ++r) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double x = a[r * n_vocab + i], y = b[r * n_vocab + i];
      num += (x - y) * (x - y);
      den += y * y;
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

}  // namespace moeflow::testing
