#include "tensor/rows_x4.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "tensor/kquants.h"

namespace moeflow {

namespace {
// Where a (file-type) block's scale and quant bytes sit: offsets inside the block.
struct BlockShape {
  size_t block_bytes, quant_bytes;
};
BlockShape block_shape(DType t) {
  switch (t) {
    case DType::Q4_0: return {sizeof(BlockQ4_0), sizeof(BlockQ4_0::qs)};
    case DType::Q8_0: return {sizeof(BlockQ8_0), sizeof(BlockQ8_0::qs)};
    case DType::Q4_K: return {sizeof(BlockQ4_K), 16};  // per 32-column sub-block, as q4_0
    default: throw std::invalid_argument(std::string("moeflow: no interleaved layout for ") + dtype_name(t));
  }
}

// Byte offsets, inside a quad, of block `blk`'s quant bytes 4k..4k+3 and of its scale.
inline size_t quant_offset(int64_t group_quant_bytes, int64_t blk, int r, int k) {
  const int64_t g = blk / 4, b = blk % 4;
  return static_cast<size_t>(g * group_quant_bytes + 64 * k + 4 * (4 * r + b));
}
inline size_t scale_offset(int64_t group_quant_bytes, int64_t groups, int64_t blk, int r) {
  const int64_t g = blk / 4, b = blk % 4;
  return static_cast<size_t>(groups * group_quant_bytes + g * kRowsX4GroupScaleBytes + 2 * (4 * r + b));
}
}  // namespace

namespace {
// Q4_K's nibble of element e (0..31) of sub-block j (0..7) of a super-block's qs:
// sub-blocks 2p and 2p+1 share bytes qs[32p .. 32p+31], low and high nibbles.
inline uint8_t q4_k_nibble(const uint8_t* qs, int j, int e) {
  const uint8_t byte = qs[32 * (j / 2) + e];
  return j % 2 ? byte >> 4 : byte & 0x0f;
}
inline size_t q4_k_scale_offset(int64_t groups, int64_t sb, int r) {
  return static_cast<size_t>(groups * 256 + sb * kRowsX4Q4KScaleBytes + 16 * r);
}

// Q4_K rows into the layout (rows_x4.h): each sub-block's nibbles paired as q4_0's.
void repack_q4_k(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  const size_t rb = row_bytes(DType::Q4_K, cols);
  const int64_t groups = cols / kRowsX4GroupCols, n_sb = cols / 256;
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * rows_x4_quad_bytes(DType::Q4_K, cols);
    for (int r = 0; r < kRowsX4; ++r) {
      const auto* blocks = reinterpret_cast<const BlockQ4_K*>(in + static_cast<size_t>(4 * q + r) * rb);
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        const BlockQ4_K& b = blocks[sb];
        uint8_t* sc = quad + q4_k_scale_offset(groups, sb, r);
        std::memcpy(sc, b.scales, 12);
        std::memcpy(sc + 12, &b.d, 2);
        std::memcpy(sc + 14, &b.dmin, 2);
        for (int j = 0; j < 8; ++j) {
          uint8_t paired[16];
          for (int i = 0; i < 16; ++i)
            paired[i] = static_cast<uint8_t>(q4_k_nibble(b.qs, j, i) | q4_k_nibble(b.qs, j, 16 + i) << 4);
          for (int k = 0; k < 4; ++k) std::memcpy(quad + quant_offset(256, 8 * sb + j, r, k), paired + 4 * k, 4);
        }
      }
    }
  }
}
}  // namespace

int64_t rows_x4_group_quant_bytes(DType t) {
  return static_cast<int64_t>(16 * block_shape(t).quant_bytes);
}

void repack_rows_x4(DType file_type, const void* src, int64_t rows, int64_t cols, void* dst) {
  if (!rows_x4_fits(rows, cols))
    throw std::invalid_argument("moeflow: repack_rows_x4: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " matrix needs rows % 4 == 0 and cols % 128 == 0");
  const BlockShape bs = block_shape(file_type);
  if (file_type == DType::Q4_K) {
    repack_q4_k(static_cast<const uint8_t*>(src), rows, cols, static_cast<uint8_t*>(dst));
    return;
  }
  const size_t rb = row_bytes(file_type, cols);
  const int64_t groups = cols / kRowsX4GroupCols, blocks = cols / 32, gq = rows_x4_group_quant_bytes(file_type);
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * rows_x4_quad_bytes(file_type, cols);
    for (int r = 0; r < kRowsX4; ++r) {
      const uint8_t* row = in + static_cast<size_t>(4 * q + r) * rb;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const uint8_t* b = row + static_cast<size_t>(blk) * bs.block_bytes;  // f16 d, then the quants
        std::memcpy(quad + scale_offset(gq, groups, blk, r), b, 2);
        for (int k = 0; k < static_cast<int>(bs.quant_bytes / 4); ++k)
          std::memcpy(quad + quant_offset(gq, blk, r, k), b + 2 + 4 * k, 4);
      }
    }
  }
}

void rows_x4_row_blocks(DType t, const void* W, int64_t cols, int64_t row, int64_t b0, int64_t n, void* out) {
  const BlockShape bs = block_shape(t);
  const int64_t groups = cols / kRowsX4GroupCols, gq = rows_x4_group_quant_bytes(t);
  const auto* quad = static_cast<const uint8_t*>(W) + static_cast<size_t>(row / kRowsX4) * rows_x4_quad_bytes(t, cols);
  const int r = static_cast<int>(row % kRowsX4);
  auto* o = static_cast<uint8_t*>(out);
  if (t == DType::Q4_K) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t sb = b0 + i;
      BlockQ4_K b{};
      const uint8_t* sc = quad + q4_k_scale_offset(groups, sb, r);
      std::memcpy(b.scales, sc, 12);
      std::memcpy(&b.d, sc + 12, 2);
      std::memcpy(&b.dmin, sc + 14, 2);
      for (int j = 0; j < 8; ++j) {
        uint8_t paired[16];
        for (int k = 0; k < 4; ++k) std::memcpy(paired + 4 * k, quad + quant_offset(256, 8 * sb + j, r, k), 4);
        for (int i = 0; i < 32; ++i) {
          const uint8_t v = i < 16 ? paired[i] & 0x0f : paired[i - 16] >> 4;
          b.qs[32 * (j / 2) + i] |= static_cast<uint8_t>(j % 2 ? v << 4 : v);
        }
      }
      std::memcpy(o + static_cast<size_t>(i) * sizeof(BlockQ4_K), &b, sizeof(BlockQ4_K));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = b0 + i;
    uint8_t* b = o + static_cast<size_t>(i) * bs.block_bytes;
    std::memcpy(b, quad + scale_offset(gq, groups, blk, r), 2);
    for (int k = 0; k < static_cast<int>(bs.quant_bytes / 4); ++k) std::memcpy(b + 2 + 4 * k, quad + quant_offset(gq, blk, r, k), 4);
  }
}

}  // namespace moeflow
