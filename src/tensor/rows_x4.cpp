#include "tensor/rows_x4.h"

#include <cstring>
#include <stdexcept>
#include <string>

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

int64_t rows_x4_group_quant_bytes(DType t) {
  return static_cast<int64_t>(16 * block_shape(t).quant_bytes);
}

void repack_rows_x4(DType file_type, const void* src, int64_t rows, int64_t cols, void* dst) {
  if (!rows_x4_fits(rows, cols))
    throw std::invalid_argument("moeflow: repack_rows_x4: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " matrix needs rows % 4 == 0 and cols % 128 == 0");
  const BlockShape bs = block_shape(file_type);
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
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = b0 + i;
    uint8_t* b = o + static_cast<size_t>(i) * bs.block_bytes;
    std::memcpy(b, quad + scale_offset(gq, groups, blk, r), 2);
    for (int k = 0; k < static_cast<int>(bs.quant_bytes / 4); ++k) std::memcpy(b + 2 + 4 * k, quad + quant_offset(gq, blk, r, k), 4);
  }
}

}  // namespace moeflow
