#include "tensor/q4_0_r4.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace moeflow {

namespace {
// Byte offsets, inside a quad, of block `blk`'s quant bytes 4k..4k+3 and of its scale.
inline size_t quant_offset(int64_t blk, int r, int k) {
  const int64_t g = blk / 4, b = blk % 4;
  return static_cast<size_t>(g * kQ4R4GroupQuantBytes + 64 * k + 4 * (4 * r + b));
}
inline size_t scale_offset(int64_t groups, int64_t blk, int r) {
  const int64_t g = blk / 4, b = blk % 4;
  return static_cast<size_t>(groups * kQ4R4GroupQuantBytes + g * kQ4R4GroupScaleBytes + 2 * (4 * r + b));
}
}  // namespace

void repack_q4_0_r4(const void* src, int64_t rows, int64_t cols, void* dst) {
  if (!q4_0_r4_fits(rows, cols))
    throw std::invalid_argument("moeflow: repack_q4_0_r4: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " matrix needs rows % 4 == 0 and cols % 128 == 0");
  const size_t rb = row_bytes(DType::Q4_0, cols);
  const int64_t groups = cols / kQ4R4GroupCols, blocks = cols / 32;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t q = 0; q < rows / kQ4R4Rows; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * q4_0_r4_quad_bytes(cols);
    for (int r = 0; r < kQ4R4Rows; ++r) {
      const auto* row = reinterpret_cast<const BlockQ4_0*>(in + static_cast<size_t>(4 * q + r) * rb);
      for (int64_t blk = 0; blk < blocks; ++blk) {
        std::memcpy(quad + scale_offset(groups, blk, r), &row[blk].d, 2);
        for (int k = 0; k < 4; ++k) std::memcpy(quad + quant_offset(blk, r, k), row[blk].qs + 4 * k, 4);
      }
    }
  }
}

void q4_0_r4_row_blocks(const void* W, int64_t cols, int64_t row, int64_t b0, int64_t n, BlockQ4_0* out) {
  const int64_t groups = cols / kQ4R4GroupCols;
  const auto* quad = static_cast<const uint8_t*>(W) + static_cast<size_t>(row / kQ4R4Rows) * q4_0_r4_quad_bytes(cols);
  const int r = static_cast<int>(row % kQ4R4Rows);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = b0 + i;
    std::memcpy(&out[i].d, quad + scale_offset(groups, blk, r), 2);
    for (int k = 0; k < 4; ++k) std::memcpy(out[i].qs + 4 * k, quad + quant_offset(blk, r, k), 4);
  }
}

}  // namespace moeflow
