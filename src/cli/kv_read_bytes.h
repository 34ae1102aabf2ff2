// Bytes of the KV cache one decode token reads: its keys and values at every position
// it attends to, in every layer. The benchmarks count them beside the weights, so a
// long context's bound is not the short one's: at 1024 positions a step of 8
// sequences of the 330M model reads ~69 MB of f16 cache beside ~160 MB of weights.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "model/model_config.h"

namespace moeflow::cli {

// The bytes of one cached position in one layer (keys and values, every kv head), as
// the engine's pool stores them (engine/forward_pass.cpp, make_kv_pool): deepseek2 one
// latent row and its rope key, the others n_head_kv heads of head_dim keys and values.
inline uint64_t kv_bytes_per_position(const ModelConfig& c, const std::string& kv_type) {
  const uint64_t elem = kv_type == "f16" ? 2 : 4;
  const uint64_t width = c.arch == Arch::DeepSeek2
                             ? static_cast<uint64_t>(2 * c.mla.kv_lora_rank + c.rot_dim)
                             : static_cast<uint64_t>(2 * c.n_head_kv * c.head_dim);
  return width * elem;
}

// A token at position pos, every layer: pos + 1 positions, a sliding window's layers
// at most the window's.
inline uint64_t kv_bytes_read(const ModelConfig& c, const std::string& kv_type, int64_t pos) {
  uint64_t positions = 0;
  for (int64_t l = 0; l < c.n_layer; ++l)
    positions += static_cast<uint64_t>(layer_slides(c, l) ? std::min(pos + 1, c.sliding_window) : pos + 1);
  return positions * kv_bytes_per_position(c, kv_type);
}

}  // namespace moeflow::cli
