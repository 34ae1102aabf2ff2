// Bytes of the KV cache one decode token reads: its keys and values at every position
// it attends to, in every layer. The benchmarks count them beside the weights, so a
// long context's bound is not the short one's: at 1024 positions a step of 8
// sequences of the 330M model reads ~69 MB of f16 cache beside ~160 MB of weights.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/forward_pass.h"
#include "model/model_config.h"

namespace moeflow::cli {

// The bytes of one cached position in one layer (keys and values, every kv head), as
// the engine's pool stores them (kv_shape; the planes of kernels/cpu/attention.h, q8_0's
// scales included). kv_type: "f32", "f16" or "q8_0" (Engine::kv_type).
inline uint64_t kv_bytes_per_position(const ModelConfig& c, const std::string& kv_type) {
  const KvShape s = kv_shape(c);
  DType t = DType::F32;
  if (!dtype_from_name(kv_type, t)) throw std::invalid_argument("moeflow: a " + kv_type + " KV cache");
  const size_t elem = kv_element_bytes(t);  // throws for a type no cache holds
  const int64_t len = KvBlockPool::kDefaultBlockLen;
  const int64_t plane = kv_plane_size(t, len, s.k_width) + kv_plane_size(t, len, s.v_width);
  return static_cast<uint64_t>(s.heads * plane / len) * elem;
}

// A token at position pos, every layer: pos + 1 positions, a sliding window's layers
// at most the window's.
inline uint64_t kv_bytes_read(const ModelConfig& c, const std::string& kv_type, int64_t pos) {
  uint64_t positions = 0;
  for (int64_t l = 0; l < c.n_layer; ++l)
    positions += static_cast<uint64_t>(layer_slides(c, l) ? std::min(pos + 1, c.sliding_window) : pos + 1);
  return positions * kv_bytes_per_position(c, kv_type);
}

// Of those, the bytes of positions [0, shared) in the layers where the token attends
// from position 0: every layer, a sliding window's only while pos is within it (the
// attention kernel reads a prefix that several sequences share once for all of them
// there).
inline uint64_t kv_bytes_shared(const ModelConfig& c, const std::string& kv_type, int64_t pos, int64_t shared) {
  uint64_t positions = 0;
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (!layer_slides(c, l) || pos < c.sliding_window)
      positions += static_cast<uint64_t>(std::min(shared, pos + 1));
  return positions * kv_bytes_per_position(c, kv_type);
}

}  // namespace moeflow::cli
