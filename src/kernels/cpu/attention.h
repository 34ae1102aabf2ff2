// Causal grouped-query attention of a block of query tokens over a KV cache.
#pragma once
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace moeflow::cpu {

struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t kv_stride = 0;  // floats between consecutive positions in k_cache / v_cache
};

// q: [n_tok][n_head*head_dim] for tokens at positions pos0 .. pos0+n_tok-1.
// k_cache, v_cache: [pos][n_head_kv*head_dim] (row stride kv_stride), holding
// positions 0 .. pos0+n_tok-1. Token t attends to positions <= pos0+t.
// out: [n_tok][n_head*head_dim]. Query head h reads kv head h / (n_head / n_head_kv).
void attention(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
               const float* k_cache, const float* v_cache, float* out, ThreadPool* pool);

// The same, one thread, scalar and in double precision: the definition the SIMD
// version is tested against.
void attention_reference(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
                         const float* k_cache, const float* v_cache, float* out);

}  // namespace moeflow::cpu
