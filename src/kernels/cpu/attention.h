// Causal grouped-query attention of a block of query tokens over a KV cache.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"

namespace moeflow::cpu {

// The KV cache is paged: a sequence's positions live in blocks of block_len
// positions taken from one pool (engine/kv_block_pool.h), found through its block
// table. Within a block each kv head has a plane of block_len * head_dim elements in
// a row, so one job reads one run: values as rows ([n_head_kv][block_len][head_dim]),
// keys transposed ([n_head_kv][head_dim][block_len]: element d of the block's
// positions together), so that a vector holds one element of consecutive positions
// and the scores come out a position per lane (kv_store_columns writes them).
//
// A Q8_0 cache (llama.cpp's -ctk/-ctv q8_0: 0.56x an f16 cache's bytes) keeps each
// plane as int8 elements followed by float scales, one per position and group of
// kKvQ8Group elements of a row (the last group shorter where the width is not a
// multiple): element x = q * scale, q = round(x / scale) in [-127, 127], scale =
// max |x| / 127 of the group. Keys' scales are [group][block_len] (a vector holds one
// group's scales of consecutive positions, as it holds their elements), values'
// [block_len][group] (a row's after its row). The int8 part is padded to 4 bytes.
constexpr int64_t kKvQ8Group = 32;
// Elements (bytes for Q8_0) of one kv head's keys or values in one block: a plane.
int64_t kv_plane_size(DType kv_type, int64_t block_len, int64_t width);
// Bytes per element of a plane's count (kv_plane_size): 4, 2 or 1. Throws
// std::invalid_argument for a type no cache holds (kv_type_supported).
size_t kv_element_bytes(DType kv_type);
// Whether attention and kv_store take caches of this type: F32, F16, Q8_0.
bool kv_type_supported(DType kv_type);

struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t block_len = 0;     // positions per block
  int64_t block_stride = 0;  // elements between consecutive blocks of the pool
  // The cache's elements: F32, F16 (IEEE half bits; half the bytes to stream per
  // step, rounded to 11 significant bits) or Q8_0 (int8 and scales, above; block_stride
  // and v_block_stride then count bytes).
  DType kv_type = DType::F32;
  // Values narrower or wider than keys (DeepSeek-V2): value rows of v_head_dim in a pool
  // of their own, v_block_stride elements between blocks; 0: as the keys.
  int64_t v_head_dim = 0, v_block_stride = 0;
  // The softmax scale; 0: 1/sqrt(head_dim).
  float scale = 0.0f;
  int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  int64_t v_stride() const { return v_block_stride > 0 ? v_block_stride : block_stride; }
  // Elements between one kv head's plane and the next within a block.
  int64_t k_plane() const { return kv_plane_size(kv_type, block_len, head_dim); }
  int64_t v_plane() const { return kv_plane_size(kv_type, block_len, v_dim()); }
  // gpt-oss: a query at position pos attends to [pos - window + 1, pos] only (0: to
  // every position up to pos, the causal mask alone).
  int64_t window = 0;
  // gpt-oss: a learned logit per query head (n_head floats, null: none) that joins
  // each softmax's denominator as a key with no value: the weights of the real keys
  // sum to less than 1.
  const float* sinks = nullptr;
};

// One query token: it attends to its sequence's positions [0, pos], whose block
// table is blocks (block b holds positions [b * block_len, (b + 1) * block_len)).
struct AttentionQuery {
  int64_t pos = 0;
  const int32_t* blocks = nullptr;
};

// q: [n_tok][n_head*head_dim]; token t is tok[t] (tokens of different sequences may
// share a call). k_cache, v_cache: the pool's first block for this layer: kv head g's
// value row for position p at tok.blocks[p / block_len] * block_stride +
// g * v_plane() + (p % block_len) * head_dim elements, its key's element d
// at tok.blocks[p / block_len] * block_stride + g * k_plane() +
// d * block_len + p % block_len (Q8_0: their scales after the plane's elements). out:
// [n_tok][n_head*v_dim()] (values at v_dim() and v_stride() likewise). Query head h
// reads kv head h / (n_head / n_head_kv).
// Throws std::invalid_argument for a cache type other than F32/F16/Q8_0 or an
// inconsistent shape. A token's result depends only on its own query and positions, never on the
// other tokens of the call, the threads or the blocks its positions landed in.
void attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
               const void* k_cache, const void* v_cache, float* out, ThreadPool* pool);

// Writes n floats into a cache of kv_type elements (f32: copied; f16: rounded to
// nearest even, as fp32_to_fp16 does). Throws std::invalid_argument for another type.
void kv_store(DType kv_type, const float* src, void* dst, int64_t n);
// The same for `rows` rows of n floats (src row r at src + r * n) to dst rows
// dst_stride elements apart: one call for every kv head of a position.
void kv_store_rows(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride);
// The same with element i of a row elem_stride elements after element i - 1: a
// position's keys into their transposed planes (elem_stride = block_len).
void kv_store_columns(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride,
                      int64_t elem_stride);

// Where one position's keys or values go: `rows` planes (one per kv head), the first
// at plane0, `plane` elements apart (kv_plane_size); the position is row `row` of a
// block of block_len; keys go into transposed planes.
struct KvSlot {
  void* plane0 = nullptr;
  int64_t plane = 0, block_len = 0, row = 0;
  bool keys = false;
  // F32 / F16 planes (elem bytes an element, rows of n): where head 0's element 0 goes,
  // and the elements from one of a row's elements to the next (transposed keys:
  // block_len). Heads are `plane` elements apart.
  void* first(size_t elem, int64_t n) const {
    return static_cast<char*>(plane0) + static_cast<size_t>(keys ? row : row * n) * elem;
  }
  int64_t element_stride() const { return keys ? block_len : 1; }
};
// Writes `rows` rows of n floats (kv head r's at src + r * n) at `at`, for every cache
// type (Q8_0: each group quantized as above). Throws std::invalid_argument for an
// unsupported type.
void kv_store_slot(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at);

// The same, one thread, scalar and in double precision: the definition the SIMD
// version is tested against.
void attention_reference(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                         const void* k_cache, const void* v_cache, float* out);

}  // namespace moeflow::cpu
