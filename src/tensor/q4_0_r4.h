// Q4_0_R4: a q4_0 matrix with its rows interleaved in fours, so that one 512-bit load
// holds 4 bytes of each of 16 (row, block) pairs and the VNNI kernel
// (kernels/cpu/q4_vnni.h) accumulates every pair in its own 32-bit lane: no gather of
// 18-byte blocks, no reduction across lanes, one scale conversion per 16 blocks.
//
// Why a second layout: GGUF's q4_0 keeps each row's blocks together, 18 bytes apiece,
// which a 512-bit kernel must gather (two loads and a byte permute per 4 blocks) and
// then reduce across lanes. `moeflow bench-kernels` on a Zen 5 core, 2048 x 768: from
// cache 35 -> 50 GB/s, streaming 28 -> 37 GB/s (two threads 37 -> 43); the 330M q4_0
// model decodes ~9% faster (A/B, `--no-repack` against the default). It exists only in
// memory: Model::make_resident repacks q4_0 matrices into it when the VNNI kernel
// runs; files keep GGUF's layout, and so do experts read from the file when offloading.
//
// Layout. Rows 4q..4q+3 ("quad q") take the same 4 * row_bytes(Q4_0, cols) bytes, at
// the same offset, as in GGUF, so row ranges that start at a multiple of 4 keep their
// addresses. With G = cols / 128 groups of 4 blocks per row, a quad is
//   quants: G x 256 bytes; byte 256g + 64k + 4(4r + b) + j = qs[4k + j] of row 4q+r's
//           block 4g+b (b, k, j < 4): vector k of group g, lane 4r+b, holds elements
//           4k..4k+3 (low nibbles) and 16+4k..16+4k+3 (high nibbles) of that block
//           (row-major lanes: the activation a lane needs is the same for every row,
//           one 128-bit pattern broadcast to the four rows);
//   scales: G x 16 f16; scale 16g + 4r + b = d of row 4q+r's block 4g+b.
// REQUIRES rows % 4 == 0 and cols % 128 == 0 (q4_0_r4_fits).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow {

constexpr int64_t kQ4R4Rows = 4;
constexpr int64_t kQ4R4GroupCols = 128;
constexpr int64_t kQ4R4GroupQuantBytes = 256;  // per quad and group
constexpr int64_t kQ4R4GroupScaleBytes = 32;

// Whether a rows x cols q4_0 matrix can take the interleaved layout.
inline bool q4_0_r4_fits(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && rows % kQ4R4Rows == 0 && cols % kQ4R4GroupCols == 0;
}

// Bytes of one quad (four rows).
inline size_t q4_0_r4_quad_bytes(int64_t cols) { return kQ4R4Rows * row_bytes(DType::Q4_0, cols); }

// Writes the interleaved copy of the rows x cols q4_0 matrix src (GGUF layout) to dst
// (same size; the two must not overlap). REQUIRES q4_0_r4_fits(rows, cols).
void repack_q4_0_r4(const void* src, int64_t rows, int64_t cols, void* dst);

// Blocks [b0, b0 + n) of row `row` of an interleaved matrix, as q4_0 blocks in GGUF
// layout: the readers that want plain rows (prefill's tile, the reference) use this.
void q4_0_r4_row_blocks(const void* W, int64_t cols, int64_t row, int64_t b0, int64_t n, BlockQ4_0* out);

}  // namespace moeflow
