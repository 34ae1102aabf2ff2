// RowLayout::rows_x4: q4_0 / q8_0 (and q4_1 / q5_0 / q5_1, iq4_nl / iq4_xs, Q4_K / Q5_K /
// Q6_K) matrices with their rows
// interleaved in fours, so that one 512-bit load holds 4 bytes of each of 16 (row,
// block) pairs and the VNNI kernels (kernels/cpu/rows_x4_vnni.h) accumulate every pair
// in its own 32-bit lane: no gather of 18- or 34-byte blocks, no reduction across
// lanes, one scale conversion per 16 blocks.
//
// Why a second layout: GGUF keeps each row's blocks together, 18 (q4_0) or 34 (q8_0)
// bytes apiece, which a 512-bit kernel must gather (two loads and a byte permute per 4
// q4_0 blocks) and then reduce across lanes. `moeflow bench-kernels` on a Zen 5 core,
// 2048 x 768: q4_0 from cache 35 -> 49-50 GB/s, streaming 27-28 -> 37 GB/s; q8_0
// (which had no VNNI kernel) from cache 44-49 -> 73-81 GB/s. The 330M model decodes
// 5-15% (q8_0) and ~15% (q4_0) faster (A/B, `--no-repack` against the default). It exists only in memory: Model::make_resident repacks matrices into it
// when the VNNI kernels run, and ExpertStore::prepare repacks experts read from the
// file into the cache when offloading; files keep GGUF's layout.
//
// Layout. Rows 4q..4q+3 ("quad q") take the same 4 * row_bytes(file type, cols) bytes,
// at the same offset, as in GGUF, so row ranges that start at a multiple of 4 keep
// their addresses. With G = cols / 128 groups of 4 blocks per row and Q quant bytes per
// block (16 for q4_0, 32 for q8_0), a quad is
//   quants: G x 16Q bytes; byte 16Qg + 64k + 4(4r + b) + j = qs[4k + j] of row 4q+r's
//           block 4g+b (b, j < 4; k < Q/4): vector k of group g, lane 4r+b, holds those
//           4 bytes (for q4_0 the elements 4k..4k+3 in the low nibbles and 16+4k..
//           16+4k+3 in the high ones; for q8_0 the elements 4k..4k+3). Row-major lanes:
//           the activation a lane needs is the same for every row, one 128-bit pattern
//           broadcast to the four rows;
//   scales: G x 16 f16; scale 16g + 4r + b = d of row 4q+r's block 4g+b.
// q5_0 as q4_0 (its qs pair elements i and 16+i as q4_0's do), and between the quants
// and the scales G x 64 bytes of fifth bits, arranged as Q5_K's below (22 bytes per
// row and block, as in the file). q4_1 and q5_1 as q4_0 and q5_0, each group's 16 d
// followed by its 16 minimums m (f16, the same order): G x 64 bytes of scales. iq4_nl
// exactly as q4_0 (the same 18-byte blocks and nibble order; a nibble indexes
// kIq4Levels instead of counting from -8). iq4_xs: its 32-column sub-blocks' nibbles as
// iq4_nl's (the file pairs them the same way), then per super-block s (256 columns) 32
// bytes: the four rows' d (f16, row r's at 2r), then for lane i = 4r + b of group 2s
// + h (row r's sub-block 4h + b) its 6-bit scale ls: the low 4 bits in byte 8 + i at bit
// 4h, the top 2 in the 64-bit word at byte 24, bit 32h + 2i (136 bytes per row and
// super-block, as in the file). x = d (ls - 32) kIq4Levels[q].
// Q4_K takes q4_0's quant arrangement for its 32-column sub-blocks ("block" 4g+b is the
// row's sub-block 4g+b, its nibbles re-paired as q4_0 pairs them: byte i holds elements
// i and 16+i), so the same kernels unpack both; and after the quants, per super-block
// s (256 columns) 64 bytes: row r's at 16r, its 12 scale bytes as Q4_K packs them, then
// d, then dmin (f16). Still 144 bytes per row and super-block, as in the file, and each
// row's scale bytes in one 128-bit lane for the kernels' per-lane shuffles. Q5_K as
// Q4_K, and between the quants and the scales, per group 64 bytes of fifth bits: eight
// 64-bit masks, one per weight vector the kernels unpack (2s: elements 4s..4s+3 of each
// block, 2s+1: elements 16+4s..), bit 4(4r + b) + i for element i of row r's block b
// (176 bytes per row and super-block, as in the file). Q6_K: the low 4 bits of each
// 6-bit value (q + 32) as Q4_K's nibbles (its "block" 4g+b spans the 16-column
// sub-blocks 2(4g+b) and 2(4g+b)+1, the halves the kernels sum apart), then per group
// two 64-byte vectors of top bits, byte 4(4r + b) + i of vector s % 2 holding those of
// step s (elements 4s+i and 16+4s+i of row r's block b) in bits 4-7 for steps 0-1 and
// 0-3 for steps 2-3; then per super-block 72 bytes: the four rows' 16 int8 scales
// (row r's at 16r) and their d (f16, at 64 + 2r). 210 bytes per row and super-block.
// REQUIRES rows % 4 == 0 and cols % 128 == 0 (rows_x4_fits; Q4_K rows are whole
// super-blocks of 256 columns anyway).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/row_layout.h"

namespace moeflow {

constexpr int64_t kRowsX4 = 4;            // rows per quad
constexpr int64_t kRowsX4GroupCols = 128;  // columns per group (4 blocks)
constexpr int64_t kRowsX4GroupScaleBytes = 32;

// Whether a rows x cols matrix can take the interleaved layout.
inline bool rows_x4_fits(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && rows % kRowsX4 == 0 && cols % kRowsX4GroupCols == 0;
}

// Whether matrices of type t can be interleaved (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl,
// iq4_xs, Q4_K, Q5_K and Q6_K).
inline bool rows_x4_supports(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || dtype_is_legacy_quant(t) || t == DType::IQ4_NL ||
         t == DType::IQ4_XS || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

// Whether t's interleaved rows have int8 kernels only (all but q4_0 and q8_0: the CPU
// backend interleaves them only where they meet int8 activations).
inline bool rows_x4_int8_only(DType t) { return rows_x4_supports(t) && t != DType::Q4_0 && t != DType::Q8_0; }

// Bytes of one super-block's scales of an iq4_xs quad (four rows' d and 32 6-bit scales).
constexpr int64_t kRowsX4Iq4XsScaleBytes = 32;

// Whether t's blocks carry a minimum (q4_1, q5_1: x = d q + m).
constexpr bool rows_x4_has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

// Bytes of one super-block's scales of a Q4_K / Q5_K quad (four rows' 16).
constexpr int64_t kRowsX4KquantScaleBytes = 64;
// Bytes of one super-block's scales of a Q6_K quad (four rows' 16 and four d).
constexpr int64_t kRowsX4Q6KScaleBytes = 72;
// Bytes of high bits per group of a quad (64 for q5_0, q5_1 and Q5_K, 128 for Q6_K, 0
// otherwise).
constexpr int64_t rows_x4_group_bit_bytes(DType t) {
  return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q5_K ? 64 : t == DType::Q6_K ? 128 : 0;
}
// Bytes of scales per group of a quad of a 32-column type (64 where blocks carry a
// minimum, else 32).
constexpr int64_t rows_x4_group_scale_bytes(DType t) { return rows_x4_has_min(t) ? 64 : kRowsX4GroupScaleBytes; }

// The fifth bits of row r's block b (0..3) in a q5_0 / q5_1 / Q5_K group's 64 bytes of them,
// as a q5_0 block's qh holds its own (bit e for element e): ORed in, and read back.
void rows_x4_put_fifth_bits(uint8_t* group_bits, int r, int b, uint32_t bits);
uint32_t rows_x4_fifth_bits(const uint8_t* group_bits, int r, int b);

// Quant bytes per group of one quad (512 for q8_0, 256 for the others).
int64_t rows_x4_group_quant_bytes(DType t);

// Bytes of one quad (four rows).
inline size_t rows_x4_quad_bytes(DType t, int64_t cols) { return kRowsX4 * row_bytes(t, cols); }

// Writes the interleaved copy of the rows x cols matrix src (GGUF layout, type
// file_type: one rows_x4_supports) to dst (same size; they must not overlap).
// REQUIRES rows_x4_fits(rows, cols).
void repack_rows_x4(DType file_type, const void* src, int64_t rows, int64_t cols, void* dst);

// Blocks [b0, b0 + n) of row `row` of an interleaved matrix W of type t, as blocks of
// the file type in GGUF layout (a 32-column type's blocks or a k-quant's of 256 columns,
// at out): the readers that want plain rows (the reference, the kernels'
// fallback) use this.
void rows_x4_row_blocks(DType t, const void* W, int64_t cols, int64_t row, int64_t b0, int64_t n, void* out);

}  // namespace moeflow
