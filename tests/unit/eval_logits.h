// Every position's logits of a prompt evaluated in one block (a 64-position f32 cache,
// no thread pool): how the loader tests compare two forms of one model.
#pragma once
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

}  // namespace moeflow::testing
