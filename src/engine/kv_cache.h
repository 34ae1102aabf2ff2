// Keys and values of every layer for positions [0, capacity), f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moeflow {

class KvCache {
 public:
  KvCache(int64_t n_layer, int64_t capacity, int64_t kv_dim)
      : n_layer_(n_layer), capacity_(capacity), kv_dim_(kv_dim),
        k_(static_cast<size_t>(n_layer * capacity * kv_dim)),
        v_(static_cast<size_t>(n_layer * capacity * kv_dim)) {}
  int64_t capacity() const { return capacity_; }
  int64_t kv_dim() const { return kv_dim_; }
  float* k(int64_t layer, int64_t pos) { return k_.data() + (layer * capacity_ + pos) * kv_dim_; }
  float* v(int64_t layer, int64_t pos) { return v_.data() + (layer * capacity_ + pos) * kv_dim_; }
  uint64_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  int64_t n_layer_, capacity_, kv_dim_;
  std::vector<float> k_, v_;
};

}  // namespace moeflow
