// Keys and values of every sequence, in fixed-size blocks from one pool (the paged KV
// cache of vLLM's PagedAttention): a sequence holds a block table, blocks are taken
// as its positions grow and returned the moment it ends, so sequences of different
// lengths share one allocation and nothing is reserved for lengths never reached.
// A full block may be in several tables (a prompt prefix that several sequences
// continue from, Engine::add_sequence): it is counted, and free when the last table
// lets it go. No one writes a shared block: a sequence writes past its shared prefix,
// which ends at a block's end.
//
// Layout: block b of layer l holds n_head_kv planes of [block_len][head_dim] values
// and of [head_dim][block_len] keys (transposed: kernels/cpu/attention.h says why), so
// what one attention job reads (one kv head, consecutive positions) is contiguous
// within a block. Head-major rows against the earlier
// [pos][n_head_kv][head_dim] ones made a 1024-token decode ~23% faster
// (docs/performance.md); a 32-position block of f16 keys with 64-wide heads is one
// 4 KiB page, the unit the hardware prefetcher follows anyway.
//
// Keys and values may differ in width (DeepSeek-V2's heads: 192-wide keys, 128-wide
// values): the value planes are [block_len][v_head_dim], in a pool of their own.
//
// Elements are f32, f16 (engine/forward_pass.h: default_kv_type) or, on a backend
// that takes it, q8_0: int8 elements with a float scale per 32 of a row after each
// plane (kernels/cpu/attention.h), 9 bits an element. The memory is a backend's (on
// the CPU an anonymous mapping: pages are touched only when a position is first
// written).
//
// Sliding-window layers (gpt-oss) may keep their rows in a pool of their own, where a
// sequence lets go of the blocks its next token's window no longer reaches
// (release_before): their table entries become kReleased, which nothing reads. Free
// blocks go out most recently freed first, and a block never used is taken only when
// every used one is held, so the memory such a pool touches is its peak of blocks held
// at once (peak_used_blocks), not its mapping.
//
// Thread safety: none; the engine's step owns it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "tensor/dtype.h"

namespace moeflow {

class KvBlockPool {
 public:
  static constexpr int64_t kDefaultBlockLen = 32;
  // A table entry whose block was let go (release_before).
  static constexpr int32_t kReleased = -1;

  // REQUIRES n_blocks >= 1. Throws InputError for a type the backend's kernels do not
  // take (names it) and when the memory cannot be mapped (names the size).
  // The memory comes from `backend`, which also writes into it (not owned; must
  // outlive the pool).
  // v_head_dim 0: values as wide as keys (head_dim).
  KvBlockPool(Backend& backend, int64_t n_layer, int64_t n_head_kv, int64_t head_dim, int64_t n_blocks,
              int64_t block_len = kDefaultBlockLen, DType type = DType::F32, int64_t v_head_dim = 0);

  int64_t block_len() const { return block_len_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return n_blocks_ - free_blocks(); }
  // The most blocks held at once since the pool was made: of its mapping, the part
  // ever written (the pages of the rest were never touched).
  int64_t peak_used_blocks() const { return peak_used_; }
  // Blocks that hold n positions.
  int64_t blocks_for(int64_t n_pos) const { return (n_pos + block_len_ - 1) / block_len_; }
  DType type() const { return type_; }
  // Keys and values of one block, every layer.
  uint64_t block_bytes() const { return static_cast<uint64_t>(block_stride() + v_block_stride()) * elem_; }
  uint64_t bytes() const { return block_bytes() * static_cast<uint64_t>(n_blocks_); }
  // Elements (bytes for q8_0) between one block and the next (the attention kernel's
  // block_stride): every layer's planes, one per kv head.
  int64_t block_stride() const { return n_layer_ * n_head_kv_ * k_plane_; }
  // The same for the values.
  int64_t v_block_stride() const { return n_layer_ * n_head_kv_ * v_plane_; }
  int64_t v_head_dim() const { return v_head_dim_; }

  // Grows `table` to cover n_pos positions. Returns false, taking nothing, when the
  // pool has too few free blocks.
  bool reserve(std::vector<int32_t>& table, int64_t n_pos);
  // Puts the first n_blocks entries of `from` into the empty `table`, its blocks shared
  // (released entries stay released).
  void share(std::vector<int32_t>& table, const std::vector<int32_t>& from, int64_t n_blocks);
  // Lets go of every block of `table` (each back in the pool when no other table holds
  // it) and clears it.
  void release(std::vector<int32_t>& table);
  // Lets go of the blocks of `table` past those n_pos positions need (a step that
  // failed gives back what it reserved).
  void shrink(std::vector<int32_t>& table, int64_t n_pos);
  // Blocks of `table` that no other table holds: what release(table) would free.
  int64_t held_alone(const std::vector<int32_t>& table) const;
  // Lets go of the blocks of `table` that hold only positions before `pos` (their
  // entries become kReleased); the rest stay.
  void release_before(std::vector<int32_t>& table, int64_t pos);
  // The first position `table` still holds a block for (0 when none was released).
  int64_t first_held(const std::vector<int32_t>& table) const;

  // Block 0's rows of `layer` (the attention kernel's k_cache / v_cache).
  const void* k(int64_t layer) const { return k_->data() + layer_offset(layer, k_plane_); }
  const void* v(int64_t layer) const { return v_->data() + layer_offset(layer, v_plane_); }
  // Writes one position's keys and values ([n_head_kv][head_dim] and
  // [n_head_kv][v_head_dim] floats) of the
  // sequence whose block table is `table`. REQUIRES the table covers pos.
  void store(int64_t layer, const int32_t* table, int64_t pos, const float* k, const float* v);

 private:
  // One table less holds the block; the last one's letting go frees it.
  void unref(int32_t block);
  // Bytes from block 0's start to a layer's first plane.
  size_t layer_offset(int64_t layer, int64_t plane) const {
    return static_cast<size_t>(layer * n_head_kv_ * plane) * elem_;
  }

  Backend* backend_;
  int64_t n_layer_, n_head_kv_, head_dim_, v_head_dim_, n_blocks_, block_len_;
  DType type_;
  size_t elem_;               // bytes per element of a plane's count
  int64_t k_plane_, v_plane_;  // elements of one kv head's keys / values in a block
  std::unique_ptr<DeviceBuffer> k_, v_;
  std::vector<int32_t> free_;  // a stack: the block freed last (still in cache) goes out first
  std::vector<int32_t> refs_;  // tables holding each block (0: free)
  int64_t peak_used_ = 0;
};

}  // namespace moeflow
