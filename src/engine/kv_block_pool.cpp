#include "engine/kv_block_pool.h"

#include <algorithm>

#include <stdexcept>
#include <string>

#include "base/error.h"

namespace moeflow {

KvBlockPool::KvBlockPool(Backend& backend, int64_t n_layer, int64_t n_head_kv, int64_t head_dim, int64_t n_blocks,
                         int64_t block_len, DType type, int64_t v_head_dim)
    : backend_(&backend), n_layer_(n_layer), n_head_kv_(n_head_kv), head_dim_(head_dim),
      v_head_dim_(v_head_dim > 0 ? v_head_dim : head_dim), n_blocks_(n_blocks), block_len_(block_len),
      type_(type) {
  if (!backend.kv_type_supported(type))
    throw InputError(std::string("a ") + dtype_name(type) + " KV cache: the " + backend.name() +
                     " backend keeps f32 or f16 caches");
  elem_ = kv_element_bytes(type);
  if (n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0 || n_blocks <= 0 || block_len <= 0)
    throw std::invalid_argument("moeflow: KvBlockPool: bad shape");
  k_plane_ = kv_plane_size(type, block_len, head_dim_);
  v_plane_ = kv_plane_size(type, block_len, v_head_dim_);
  if (n_blocks > (int64_t{1} << 31) - 1)
    throw InputError("a KV cache of " + std::to_string(n_blocks) + " blocks of " + std::to_string(block_len) +
                     " positions is more than the pool can index: lower --ctx-size or --parallel");
  const uint64_t blocks = static_cast<uint64_t>(n_blocks_) * elem_;
  k_ = backend.allocate_cache(static_cast<uint64_t>(block_stride()) * blocks);
  v_ = backend.allocate_cache(static_cast<uint64_t>(v_block_stride()) * blocks);
  if (!k_ || !v_)
    throw InputError("cannot map " + std::to_string(bytes() >> 20) + " MiB for the KV cache (" +
                     std::to_string(n_blocks) + " blocks of " + std::to_string(block_len) +
                     " positions): lower --ctx-size or --parallel");
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  refs_.assign(static_cast<size_t>(n_blocks), 0);
}

void KvBlockPool::unref(int32_t block) {
  if (block == kReleased) return;
  if (--refs_[static_cast<size_t>(block)] == 0) free_.push_back(block);
}

bool KvBlockPool::reserve(std::vector<int32_t>& table, int64_t n_pos) {
  const int64_t need = blocks_for(n_pos) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    refs_[static_cast<size_t>(free_.back())] = 1;
    free_.pop_back();
  }
  peak_used_ = std::max(peak_used_, used_blocks());
  return true;
}

int64_t KvBlockPool::held_alone(const std::vector<int32_t>& table) const {
  return std::count_if(table.begin(), table.end(),
                       [&](int32_t b) { return b != kReleased && refs_[static_cast<size_t>(b)] == 1; });
}

void KvBlockPool::release_before(std::vector<int32_t>& table, int64_t pos) {
  // Entries are released from the front, so the walk back stops at the first one that
  // already was.
  for (int64_t b = std::min<int64_t>(pos / block_len_, static_cast<int64_t>(table.size())); b-- > 0;) {
    int32_t& e = table[static_cast<size_t>(b)];
    if (e == kReleased) break;
    unref(e);
    e = kReleased;
  }
}

int64_t KvBlockPool::first_held(const std::vector<int32_t>& table) const {
  int64_t b = 0;
  while (b < static_cast<int64_t>(table.size()) && table[static_cast<size_t>(b)] == kReleased) ++b;
  return b * block_len_;
}

void KvBlockPool::share(std::vector<int32_t>& table, const std::vector<int32_t>& from, int64_t n_blocks) {
  if (!table.empty() || n_blocks < 0 || n_blocks > static_cast<int64_t>(from.size()))
    throw std::invalid_argument("moeflow: KvBlockPool::share: a non-empty table or too many blocks");
  table.assign(from.begin(), from.begin() + n_blocks);
  for (int32_t b : table)
    if (b != kReleased) ++refs_[static_cast<size_t>(b)];
}

void KvBlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) unref(*it);
  table.clear();
}

void KvBlockPool::shrink(std::vector<int32_t>& table, int64_t n_pos) {
  const auto keep = static_cast<size_t>(std::max<int64_t>(0, blocks_for(n_pos)));
  while (table.size() > keep) {
    unref(table.back());
    table.pop_back();
  }
}

void KvBlockPool::store(int64_t layer, const int32_t* table, int64_t pos, const float* k, const float* v) {
  const size_t block = static_cast<size_t>(table[pos / block_len_]);
  const int64_t row = pos % block_len_;
  const size_t k_off = block * static_cast<size_t>(block_stride()) * elem_ + layer_offset(layer, k_plane_);
  const size_t v_off = block * static_cast<size_t>(v_block_stride()) * elem_ + layer_offset(layer, v_plane_);
  backend_->kv_store(type_, k, n_head_kv_, head_dim_, {k_->data() + k_off, k_plane_, block_len_, row, true});
  backend_->kv_store(type_, v, n_head_kv_, v_head_dim_, {v_->data() + v_off, v_plane_, block_len_, row, false});
}

}  // namespace moeflow
