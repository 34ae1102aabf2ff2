#include "tensor/rows_x4.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tensor/iquants.h"
#include "tensor/kquants.h"
#include "tensor/legacy_quants.h"

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
    case DType::Q5_0: return {sizeof(BlockQ5_0), sizeof(BlockQ5_0::qs)};
    case DType::Q4_1: return {sizeof(BlockQ4_1), sizeof(BlockQ4_1::qs)};
    case DType::Q5_1: return {sizeof(BlockQ5_1), sizeof(BlockQ5_1::qs)};
    case DType::IQ4_NL: return {sizeof(BlockIQ4_NL), sizeof(BlockIQ4_NL::qs)};
    case DType::IQ4_XS: return {sizeof(BlockIQ4_XS), 16};  // per 32-column sub-block, as iq4_nl
    case DType::Q4_K: return {sizeof(BlockQ4_K), 16};  // per 32-column sub-block, as q4_0
    case DType::Q5_K: return {sizeof(BlockQ5_K), 16};
    case DType::Q6_K: return {sizeof(BlockQ6_K), 16};
    default: throw std::invalid_argument(std::string("moeflow: no interleaved layout for ") + dtype_name(t));
  }
}

// Byte offsets, inside a quad, of block `blk`'s quant bytes 4k..4k+3 and of its scale.
inline size_t quant_offset(int64_t group_quant_bytes, int64_t blk, int r, int k) {
  const int64_t g = blk / 4, b = blk % 4;
  return static_cast<size_t>(g * group_quant_bytes + 64 * k + 4 * (4 * r + b));
}
// (A minimum, where blocks carry one, 32 bytes after its scale.)
inline size_t scale_offset(DType t, int64_t groups, int64_t blk, int r) {
  const int64_t g = blk / 4, b = blk % 4;
  const int64_t head = rows_x4_group_quant_bytes(t) + rows_x4_group_bit_bytes(t);
  return static_cast<size_t>(groups * head + g * rows_x4_group_scale_bytes(t) + 2 * (4 * r + b));
}

// Q4_K's (Q5_K's) nibble of element e (0..31) of sub-block j (0..7) of a super-block's
// qs: sub-blocks 2p and 2p+1 share bytes qs[32p .. 32p+31], low and high nibbles.
inline uint8_t kq_nibble(const uint8_t* qs, int j, int e) {
  const uint8_t byte = qs[32 * (j / 2) + e];
  return j % 2 ? byte >> 4 : byte & 0x0f;
}
// Where a Q4_K / Q5_K quad keeps super-block sb's scale bytes of row r, and (Q5_K)
// group g's fifth bits.
inline size_t kq_scale_offset(DType t, int64_t groups, int64_t sb, int r) {
  return static_cast<size_t>(groups * (256 + rows_x4_group_bit_bytes(t)) + sb * kRowsX4KquantScaleBytes + 16 * r);
}
inline size_t kq_bits_offset(int64_t groups, int64_t g) { return static_cast<size_t>(groups * 256 + g * 64); }
// Q5_K's fifth bits of sub-block j (0..7) of a super-block as a Q5_0 block keeps its
// own (bit e for element e), and back.
inline uint32_t q5_k_block_bits(const uint8_t* qh, int j) {
  uint32_t bits = 0;
  for (int e = 0; e < 32; ++e) bits |= static_cast<uint32_t>((qh[e] >> j) & 1) << e;
  return bits;
}
inline void q5_k_put_block_bits(uint8_t* qh, int j, uint32_t bits) {
  for (int e = 0; e < 32; ++e) qh[e] |= static_cast<uint8_t>(((bits >> e) & 1) << j);
}

template <class Block>
void repack_kq(DType t, const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  const size_t rb = row_bytes(t, cols);
  const int64_t groups = cols / kRowsX4GroupCols, n_sb = cols / 256;
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * rows_x4_quad_bytes(t, cols);
    if (kQ5) std::memset(quad + kq_bits_offset(groups, 0), 0, static_cast<size_t>(groups * 64));
    for (int r = 0; r < kRowsX4; ++r) {
      const auto* blocks = reinterpret_cast<const Block*>(in + static_cast<size_t>(4 * q + r) * rb);
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        const Block& b = blocks[sb];
        uint8_t* sc = quad + kq_scale_offset(t, groups, sb, r);
        std::memcpy(sc, b.scales, 12);
        std::memcpy(sc + 12, &b.d, 2);
        std::memcpy(sc + 14, &b.dmin, 2);
        for (int j = 0; j < 8; ++j) {
          uint8_t paired[16];
          for (int i = 0; i < 16; ++i)
            paired[i] = static_cast<uint8_t>(kq_nibble(b.qs, j, i) | kq_nibble(b.qs, j, 16 + i) << 4);
          const int64_t blk = 8 * sb + j;
          for (int k = 0; k < 4; ++k) std::memcpy(quad + quant_offset(256, blk, r, k), paired + 4 * k, 4);
          if constexpr (kQ5)
            rows_x4_put_fifth_bits(quad + kq_bits_offset(groups, blk / 4), r, static_cast<int>(blk % 4),
                                   q5_k_block_bits(b.qh, j));
        }
      }
    }
  }
}

template <class Block>
void row_blocks_kq(DType t, const uint8_t* quad, int64_t cols, int r, int64_t b0, int64_t n, uint8_t* out) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  const int64_t groups = cols / kRowsX4GroupCols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t sb = b0 + i;
    Block b{};
    const uint8_t* sc = quad + kq_scale_offset(t, groups, sb, r);
    std::memcpy(b.scales, sc, 12);
    std::memcpy(&b.d, sc + 12, 2);
    std::memcpy(&b.dmin, sc + 14, 2);
    for (int j = 0; j < 8; ++j) {
      const int64_t blk = 8 * sb + j;
      uint8_t paired[16];
      for (int k = 0; k < 4; ++k) std::memcpy(paired + 4 * k, quad + quant_offset(256, blk, r, k), 4);
      for (int e = 0; e < 32; ++e) {
        const uint8_t v = e < 16 ? paired[e] & 0x0f : paired[e - 16] >> 4;
        b.qs[32 * (j / 2) + e] |= static_cast<uint8_t>(j % 2 ? v << 4 : v);
      }
      if constexpr (kQ5)
        q5_k_put_block_bits(b.qh, j, rows_x4_fifth_bits(quad + kq_bits_offset(groups, blk / 4), r, static_cast<int>(blk % 4)));
    }
    std::memcpy(out + static_cast<size_t>(i) * sizeof(Block), &b, sizeof(Block));
  }
}

// Q6_K (tensor/rows_x4.h): element e (0..255) of a super-block as the file keeps it, its
// 6-bit value (q + 32) split into the low 4 and the top 2 bits.
inline void q6_k_element(const BlockQ6_K& b, int e, uint8_t& low4, uint8_t& top2) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t ql = b.ql[64 * h + l + 32 * (k % 2)];
  low4 = k < 2 ? ql & 0x0f : ql >> 4;
  top2 = (b.qh[32 * h + l] >> (2 * k)) & 3;
}
// Where element e of row r's 32-column block b of a group sits among the group's two
// 64-byte vectors of top bits: vector s % 2 for its step s = (e % 16) / 4, byte
// 4 (4r + b) + e % 4, bits 4-5 (steps 0-1, first half), 6-7 (steps 0-1, second half),
// 0-1 and 2-3 (steps 2-3).
inline void q6_top_place(int r, int b, int e, size_t& byte, int& shift) {
  const int s = (e % 16) / 4, half = e / 16;
  byte = static_cast<size_t>(64 * (s % 2) + 4 * (4 * r + b) + e % 4);
  shift = (s < 2 ? 4 : 0) + 2 * half;
}
inline size_t q6_scale_offset(int64_t groups, int64_t sb) {
  return static_cast<size_t>(groups * (256 + 128) + sb * kRowsX4Q6KScaleBytes);
}

void repack_q6_k(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  const size_t rb = row_bytes(DType::Q6_K, cols);
  const int64_t groups = cols / kRowsX4GroupCols, n_sb = cols / 256;
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * rows_x4_quad_bytes(DType::Q6_K, cols);
    std::memset(quad + groups * 256, 0, static_cast<size_t>(groups * 128));
    for (int r = 0; r < kRowsX4; ++r) {
      const auto* blocks = reinterpret_cast<const BlockQ6_K*>(in + static_cast<size_t>(4 * q + r) * rb);
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        const BlockQ6_K& b = blocks[sb];
        uint8_t* sc = quad + q6_scale_offset(groups, sb);
        std::memcpy(sc + 16 * r, b.scales, 16);
        std::memcpy(sc + 64 + 2 * r, &b.d, 2);
        for (int j = 0; j < 8; ++j) {  // 32-column blocks
          const int64_t blk = 8 * sb + j;
          uint8_t low[32], top[32];
          for (int e = 0; e < 32; ++e) q6_k_element(b, 32 * j + e, low[e], top[e]);
          uint8_t paired[16];
          for (int i = 0; i < 16; ++i) paired[i] = static_cast<uint8_t>(low[i] | low[16 + i] << 4);
          for (int k = 0; k < 4; ++k) std::memcpy(quad + quant_offset(256, blk, r, k), paired + 4 * k, 4);
          uint8_t* tops = quad + groups * 256 + (blk / 4) * 128;
          for (int e = 0; e < 32; ++e) {
            size_t byte;
            int shift;
            q6_top_place(r, static_cast<int>(blk % 4), e, byte, shift);
            tops[byte] |= static_cast<uint8_t>(top[e] << shift);
          }
        }
      }
    }
  }
}

// iq4_xs (tensor/rows_x4.h): where super-block sb's 32 bytes of scales sit in a quad.
inline size_t iq4_xs_scales(int64_t groups, int64_t sb) {
  return static_cast<size_t>(groups * 256 + sb * kRowsX4Iq4XsScaleBytes);
}
inline int iq4_xs_ls(const BlockIQ4_XS& b, int ib) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}
// Where row r's sub-block ib keeps its scale among a super-block's 32 bytes: the low 4
// bits in byte `low` at bit `low_shift`, the top 2 in the word at byte 24 at bit `top_shift`.
struct Iq4XsScalePlace {
  int low, low_shift, top_shift;
};
inline Iq4XsScalePlace iq4_xs_scale_place(int r, int ib) {
  const int h = ib / 4, lane = 4 * r + ib % 4;
  return {8 + lane, 4 * h, 32 * h + 2 * lane};
}

void repack_iq4_xs(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  const size_t rb = row_bytes(DType::IQ4_XS, cols);
  const int64_t groups = cols / kRowsX4GroupCols, n_sb = cols / 256;
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * rows_x4_quad_bytes(DType::IQ4_XS, cols);
    std::memset(quad + iq4_xs_scales(groups, 0), 0, static_cast<size_t>(n_sb * kRowsX4Iq4XsScaleBytes));
    for (int r = 0; r < kRowsX4; ++r) {
      const auto* blocks = reinterpret_cast<const BlockIQ4_XS*>(in + static_cast<size_t>(4 * q + r) * rb);
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        const BlockIQ4_XS& b = blocks[sb];
        uint8_t* sc = quad + iq4_xs_scales(groups, sb);
        std::memcpy(sc + 2 * r, &b.d, 2);
        uint64_t top;
        std::memcpy(&top, sc + 24, 8);
        for (int ib = 0; ib < 8; ++ib) {
          const int ls = iq4_xs_ls(b, ib);
          const Iq4XsScalePlace at = iq4_xs_scale_place(r, ib);
          sc[at.low] |= static_cast<uint8_t>((ls & 0xf) << at.low_shift);
          top |= static_cast<uint64_t>(ls >> 4) << at.top_shift;
          for (int k = 0; k < 4; ++k) std::memcpy(quad + quant_offset(256, 8 * sb + ib, r, k), b.qs + 16 * ib + 4 * k, 4);
        }
        std::memcpy(sc + 24, &top, 8);
      }
    }
  }
}

void row_blocks_iq4_xs(const uint8_t* quad, int64_t cols, int r, int64_t b0, int64_t n, uint8_t* out) {
  const int64_t groups = cols / kRowsX4GroupCols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t sb = b0 + i;
    BlockIQ4_XS b{};
    const uint8_t* sc = quad + iq4_xs_scales(groups, sb);
    std::memcpy(&b.d, sc + 2 * r, 2);
    uint64_t top;
    std::memcpy(&top, sc + 24, 8);
    for (int ib = 0; ib < 8; ++ib) {
      const Iq4XsScalePlace at = iq4_xs_scale_place(r, ib);
      const int ls = ((sc[at.low] >> at.low_shift) & 0xf) | static_cast<int>(((top >> at.top_shift) & 3) << 4);
      b.scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (ib % 2)));
      b.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
      for (int k = 0; k < 4; ++k) std::memcpy(b.qs + 16 * ib + 4 * k, quad + quant_offset(256, 8 * sb + ib, r, k), 4);
    }
    std::memcpy(out + static_cast<size_t>(i) * sizeof(BlockIQ4_XS), &b, sizeof(BlockIQ4_XS));
  }
}

void row_blocks_q6_k(const uint8_t* quad, int64_t cols, int r, int64_t b0, int64_t n, uint8_t* out) {
  const int64_t groups = cols / kRowsX4GroupCols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t sb = b0 + i;
    BlockQ6_K b{};
    const uint8_t* sc = quad + q6_scale_offset(groups, sb);
    std::memcpy(b.scales, sc + 16 * r, 16);
    std::memcpy(&b.d, sc + 64 + 2 * r, 2);
    for (int j = 0; j < 8; ++j) {
      const int64_t blk = 8 * sb + j;
      uint8_t paired[16];
      for (int k = 0; k < 4; ++k) std::memcpy(paired + 4 * k, quad + quant_offset(256, blk, r, k), 4);
      const uint8_t* tops = quad + groups * 256 + (blk / 4) * 128;
      for (int e = 0; e < 32; ++e) {
        const uint8_t low4 = e < 16 ? paired[e] & 0x0f : paired[e - 16] >> 4;
        size_t byte;
        int shift;
        q6_top_place(r, static_cast<int>(blk % 4), e, byte, shift);
        const uint8_t top2 = (tops[byte] >> shift) & 3;
        const int el = 32 * j + e, h = el / 128, k = (el % 128) / 32, l = el % 32;
        b.ql[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>(k < 2 ? low4 : low4 << 4);
        b.qh[32 * h + l] |= static_cast<uint8_t>(top2 << (2 * k));
      }
    }
    std::memcpy(out + static_cast<size_t>(i) * sizeof(BlockQ6_K), &b, sizeof(BlockQ6_K));
  }
}
}  // namespace

// Mask 2s + h (8 bytes) holds, at bits 4(4r + b) .. + 3, the fifth bits of elements
// 16h + 4s .. + 3 of row r's block b: the weight vector the kernels unpack at step s,
// low (h = 0) or high (h = 1) nibbles.
void rows_x4_put_fifth_bits(uint8_t* group_bits, int r, int b, uint32_t bits) {
  const int pos = 4 * (4 * r + b);
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 4; ++s)
      group_bits[8 * (2 * s + h) + pos / 8] |= static_cast<uint8_t>(((bits >> (16 * h + 4 * s)) & 0xf) << (pos % 8));
}

uint32_t rows_x4_fifth_bits(const uint8_t* group_bits, int r, int b) {
  const int pos = 4 * (4 * r + b);
  uint32_t bits = 0;
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 4; ++s)
      bits |= static_cast<uint32_t>((group_bits[8 * (2 * s + h) + pos / 8] >> (pos % 8)) & 0xf) << (16 * h + 4 * s);
  return bits;
}

int64_t rows_x4_group_quant_bytes(DType t) {
  return static_cast<int64_t>(16 * block_shape(t).quant_bytes);
}

void repack_rows_x4(DType file_type, const void* src, int64_t rows, int64_t cols, void* dst) {
  if (!rows_x4_fits(rows, cols))
    throw std::invalid_argument("moeflow: repack_rows_x4: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " matrix needs rows % 4 == 0 and cols % 128 == 0");
  const BlockShape bs = block_shape(file_type);
  if (file_type == DType::Q4_K || file_type == DType::Q5_K) {
    const auto* in = static_cast<const uint8_t*>(src);
    auto* o = static_cast<uint8_t*>(dst);
    if (file_type == DType::Q4_K) repack_kq<BlockQ4_K>(file_type, in, rows, cols, o);
    else repack_kq<BlockQ5_K>(file_type, in, rows, cols, o);
    return;
  }
  if (file_type == DType::Q6_K) {
    repack_q6_k(static_cast<const uint8_t*>(src), rows, cols, static_cast<uint8_t*>(dst));
    return;
  }
  if (file_type == DType::IQ4_XS) {
    repack_iq4_xs(static_cast<const uint8_t*>(src), rows, cols, static_cast<uint8_t*>(dst));
    return;
  }
  const size_t rb = row_bytes(file_type, cols);
  const int64_t groups = cols / kRowsX4GroupCols, blocks = cols / 32, gq = rows_x4_group_quant_bytes(file_type);
  const int64_t gbits = rows_x4_group_bit_bytes(file_type);
  const bool min = rows_x4_has_min(file_type);
  // f16 d (and m), then q5_0's / q5_1's 4 bytes of qh, then the quants.
  const size_t qs_at = bs.block_bytes - bs.quant_bytes, qh_at = qs_at - 4;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    uint8_t* quad = out + static_cast<size_t>(q) * rows_x4_quad_bytes(file_type, cols);
    if (gbits) std::memset(quad + groups * gq, 0, static_cast<size_t>(groups * gbits));
    for (int r = 0; r < kRowsX4; ++r) {
      const uint8_t* row = in + static_cast<size_t>(4 * q + r) * rb;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const uint8_t* b = row + static_cast<size_t>(blk) * bs.block_bytes;
        std::memcpy(quad + scale_offset(file_type, groups, blk, r), b, 2);
        if (min) std::memcpy(quad + scale_offset(file_type, groups, blk, r) + 32, b + 2, 2);
        for (int k = 0; k < static_cast<int>(bs.quant_bytes / 4); ++k)
          std::memcpy(quad + quant_offset(gq, blk, r, k), b + qs_at + 4 * k, 4);
        if (gbits) {
          uint32_t qh;
          std::memcpy(&qh, b + qh_at, 4);
          rows_x4_put_fifth_bits(quad + groups * gq + (blk / 4) * gbits, r, static_cast<int>(blk % 4), qh);
        }
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
    row_blocks_kq<BlockQ4_K>(t, quad, cols, r, b0, n, o);
    return;
  }
  if (t == DType::Q5_K) {
    row_blocks_kq<BlockQ5_K>(t, quad, cols, r, b0, n, o);
    return;
  }
  if (t == DType::Q6_K) {
    row_blocks_q6_k(quad, cols, r, b0, n, o);
    return;
  }
  if (t == DType::IQ4_XS) {
    row_blocks_iq4_xs(quad, cols, r, b0, n, o);
    return;
  }
  const int64_t gbits = rows_x4_group_bit_bytes(t);
  const size_t qs_at = bs.block_bytes - bs.quant_bytes, qh_at = qs_at - 4;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = b0 + i;
    uint8_t* b = o + static_cast<size_t>(i) * bs.block_bytes;
    std::memcpy(b, quad + scale_offset(t, groups, blk, r), 2);
    if (rows_x4_has_min(t)) std::memcpy(b + 2, quad + scale_offset(t, groups, blk, r) + 32, 2);
    for (int k = 0; k < static_cast<int>(bs.quant_bytes / 4); ++k)
      std::memcpy(b + qs_at + 4 * k, quad + quant_offset(gq, blk, r, k), 4);
    if (gbits) {
      const uint32_t qh = rows_x4_fifth_bits(quad + groups * gq + (blk / 4) * gbits, r, static_cast<int>(blk % 4));
      std::memcpy(b + qh_at, &qh, 4);
    }
  }
}

}  // namespace moeflow
