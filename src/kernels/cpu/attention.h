// Causal grouped-query attention of a block of query tokens over a KV cache.
#pragma once
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"

namespace moeflow::cpu {

struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t kv_stride = 0;  // elements between consecutive positions in k_cache / v_cache
  // Elements between kv heads' slices of a position: 0 means head_dim (rows of
  // [n_head_kv][head_dim]); a head-major cache passes its per-head plane.
  int64_t kv_head_stride = 0;
  // The cache's elements: F32, or F16 (IEEE half bits; half the bytes to stream per
  // step, rounded to 11 significant bits).
  DType kv_type = DType::F32;
  int64_t head_offset() const { return kv_head_stride ? kv_head_stride : head_dim; }
};

// q: [n_tok][n_head*head_dim] for tokens at positions pos0 .. pos0+n_tok-1.
// k_cache, v_cache: kv head g's row for position p at g * head_offset() + p * kv_stride
// ([pos][n_head_kv*head_dim] by default), holding positions 0 .. pos0+n_tok-1. Token t attends to positions <= pos0+t.
// out: [n_tok][n_head*head_dim]. Query head h reads kv head h / (n_head / n_head_kv).
// The caches hold s.kv_type elements. Throws std::invalid_argument for another type.
void attention(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
               const void* k_cache, const void* v_cache, float* out, ThreadPool* pool);

// Writes n floats into a cache of kv_type elements (f32: copied; f16: rounded to
// nearest even, as fp32_to_fp16 does). Throws std::invalid_argument for another type.
void kv_store(DType kv_type, const float* src, void* dst, int64_t n);
// The same for `rows` rows of n floats (src row r at src + r * n) to dst rows
// dst_stride elements apart: one call for every kv head of a position.
void kv_store_rows(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride);

// The same, one thread, scalar and in double precision: the definition the SIMD
// version is tested against.
void attention_reference(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
                         const void* k_cache, const void* v_cache, float* out);

}  // namespace moeflow::cpu
