// Keys and values of every layer for positions [0, capacity), head-major: each layer
// holds n_head_kv planes of [capacity][head_dim], so the rows one attention job reads
// (one kv head, every position) are one contiguous stream. Against the earlier
// [pos][n_head_kv][head_dim] rows (a job read 256 bytes of every 1 KiB), 330M q4_0
// model, 1024-token prompt, 3 A/B pairs: decode 388-414 -> 477-512 tok/s; at ~150
// positions within noise.
//
// Elements are f32 or f16. Attention streams the whole cache of a layer once per
// decode step, so f16 halves that traffic (and the cache's memory) at the price of
// rounding keys and values to 11 significant bits (relative 2^-12), below the
// rounding q8_0 / q4_0 weights already carry; see default_kv_type. 330M q4_0 model,
// 1024-token prompt, f32 against f16 alternating: decode +9-25% in 5 of 7 pairs, the
// other 2 within noise; the fixtures' logits move from 4e-5 to 2.4-4.1e-4 of the
// reference (bound 1e-3), greedy tokens unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tensor/dtype.h"

namespace moeflow {

class KvCache {
 public:
  // REQUIRES type is F32 or F16 (else std::invalid_argument).
  KvCache(int64_t n_layer, int64_t capacity, int64_t n_head_kv, int64_t head_dim, DType type = DType::F32)
      : n_layer_(n_layer), capacity_(capacity), n_head_kv_(n_head_kv), head_dim_(head_dim), type_(type),
        elem_(type == DType::F16 ? 2 : 4),
        k_(static_cast<size_t>(n_layer * capacity * n_head_kv * head_dim) * elem_),
        v_(k_.size()) {
    if (type != DType::F32 && type != DType::F16)
      throw std::invalid_argument(std::string("moeflow: a ") + dtype_name(type) + " KV cache (f32 or f16 only)");
  }
  int64_t capacity() const { return capacity_; }
  DType type() const { return type_; }
  // Elements between one kv head's plane and the next.
  int64_t head_stride() const { return capacity_ * head_dim_; }
  // Layer l's keys / values: kv head h's row for position p at element h * head_stride() + p * head_dim.
  const void* k(int64_t layer) const { return k_.data() + offset(layer, 0, 0); }
  const void* v(int64_t layer) const { return v_.data() + offset(layer, 0, 0); }
  // Writes one position's keys and values, [n_head_kv][head_dim] floats each.
  void store(int64_t layer, int64_t pos, const float* k, const float* v) {
    cpu::kv_store_rows(type_, k, n_head_kv_, head_dim_, k_.data() + offset(layer, 0, pos), head_stride());
    cpu::kv_store_rows(type_, v, n_head_kv_, head_dim_, v_.data() + offset(layer, 0, pos), head_stride());
  }
  uint64_t bytes() const { return k_.size() + v_.size(); }

 private:
  size_t offset(int64_t layer, int64_t head, int64_t pos) const {
    return static_cast<size_t>(((layer * n_head_kv_ + head) * capacity_ + pos) * head_dim_) * elem_;
  }
  int64_t n_layer_, capacity_, n_head_kv_, head_dim_;
  DType type_;
  size_t elem_;  // bytes per element
  std::vector<uint8_t> k_, v_;
};

}  // namespace moeflow
