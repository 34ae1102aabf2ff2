// The interleaved layouts (tensor/rows_x4.h): byte positions as documented, the round
// trip to GGUF's blocks, prefill's dequantisation, and the guards that keep the layouts out
// of files and rows.
#include "tensor/rows_x4.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "format/gguf.h"
#include "cpu_placer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/rows_x4_vnni.h"
#include "tensor/dtype.h"
#include "tensor/kquants.h"

namespace moeflow {
namespace {

// rows x cols blocks of type t, every byte random (scales included: only bytes move).
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> b(row_bytes(t, cols) * static_cast<size_t>(rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : b) v = static_cast<uint8_t>(byte(rng));
  return b;
}

const DType kFileTypes[] = {DType::Q4_0, DType::Q8_0, DType::IQ4_NL};  // f16 d, then the quants
// The 32-column types: q4_1 / q5_0 / q5_1 keep their minimums and fifth bits apart
// (their own test below).
const DType kBlockTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::IQ4_NL};

TEST(RowsX4, BytesSitWhereTheLayoutSays) {
  std::mt19937 rng(3);
  for (DType t : kFileTypes) {
    const int64_t rows = 8, cols = 256, groups = cols / 128, nb = cols / 32;
    const size_t bb = static_cast<size_t>(dtype_info(t).type_size), qbytes = bb - 2;
    const auto src = random_rows(t, rows, cols, rng);
    std::vector<uint8_t> dst(src.size());
    repack_rows_x4(t, src.data(), rows, cols, dst.data());
    const size_t quad_bytes = rows_x4_quad_bytes(t, cols);
    ASSERT_EQ(quad_bytes, 4 * row_bytes(t, cols));
    ASSERT_EQ(rows_x4_group_quant_bytes(t), static_cast<int64_t>(16 * qbytes));
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t blk = 0; blk < nb; ++blk) {
        const uint8_t* b = src.data() + static_cast<size_t>(row * nb + blk) * bb;  // d, then qs
        const uint8_t* quad = dst.data() + static_cast<size_t>(row / 4) * quad_bytes;
        const int64_t r = row % 4, g = blk / 4, bi = blk % 4;
        for (size_t k = 0; k < qbytes / 4; ++k)
          for (int j = 0; j < 4; ++j)
            ASSERT_EQ(quad[16 * qbytes * g + 64 * k + 4 * (4 * r + bi) + j], b[2 + 4 * k + j])
                << dtype_name(t) << " row " << row << " block " << blk;
        const uint8_t* d = quad + 16 * qbytes * groups + 32 * g + 2 * (4 * r + bi);
        ASSERT_EQ(std::memcmp(d, b, 2), 0) << dtype_name(t) << " row " << row << " block " << blk;
      }
  }
}

// The load-time repack (AVX-512 where the CPU has it) writes what the reference does.
TEST(RowsX4, FastRepackMatchesTheReference) {
  std::mt19937 rng(4);
  for (DType t : kBlockTypes)
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4, 128}, {12, 768}, {8, 2048}}) {
      const auto src = random_rows(t, rows, cols, rng);
      std::vector<uint8_t> want(src.size()), got(src.size());
      repack_rows_x4(t, src.data(), rows, cols, want.data());
      cpu::rows_x4_repack(t, src.data(), rows, cols, got.data());
      EXPECT_EQ(got, want) << dtype_name(t) << " " << rows << "x" << cols;
    }
}

TEST(RowsX4, RowBlocksRebuildEveryBlock) {
  std::mt19937 rng(5);
  for (DType t : kBlockTypes) {
    const size_t bb = static_cast<size_t>(dtype_info(t).type_size);
    for (int64_t rows : {4, 12}) {
      for (int64_t cols : {128, 384, 2048}) {
        const auto src = random_rows(t, rows, cols, rng);
        std::vector<uint8_t> dst(src.size());
        repack_rows_x4(t, src.data(), rows, cols, dst.data());
        const int64_t nb = cols / 32;
        std::vector<uint8_t> back(static_cast<size_t>(nb) * bb);
        for (int64_t row = 0; row < rows; ++row) {
          rows_x4_row_blocks(t, dst.data(), cols, row, 0, nb, back.data());
          ASSERT_EQ(std::memcmp(back.data(), src.data() + row * nb * bb, nb * bb), 0)
              << dtype_name(t) << " " << rows << "x" << cols << " row " << row;
          // A span in the middle.
          rows_x4_row_blocks(t, dst.data(), cols, row, 1, nb - 2, back.data());
          ASSERT_EQ(std::memcmp(back.data(), src.data() + (row * nb + 1) * bb, (nb - 2) * bb), 0);
        }
      }
    }
  }
}

// Prefill's dequantisation of a quad's groups (AVX-512 shuffles where the CPU has
// them): the floats dequantize_row gives for the GGUF rows, exactly.
TEST(RowsX4, DequantQuadMatchesGgufRows) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (DType t : kBlockTypes) {
    const int64_t rows = 8, cols = 768, ld = cols + 16;
    std::vector<float> vals(static_cast<size_t>(rows * cols));
    for (auto& v : vals) v = uni(rng);
    std::vector<uint8_t> src(row_bytes(t, cols) * rows), dst(src.size());
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, vals.data() + r * cols, src.data() + r * row_bytes(t, cols), cols);
    repack_rows_x4(t, src.data(), rows, cols, dst.data());
    std::vector<float> want(static_cast<size_t>(cols));
    for (int64_t q = 0; q < rows / 4; ++q)
      for (const auto& [g0, ng] : {std::pair<int64_t, int64_t>{0, 6}, {2, 3}, {5, 1}}) {
        std::vector<float> out(static_cast<size_t>(4 * ld), -1.0f);
        cpu::rows_x4_dequant_quad(t, dst.data() + q * rows_x4_quad_bytes(t, cols), cols, g0, ng, out.data(), ld);
        for (int r = 0; r < 4; ++r) {
          dequantize_row(t, src.data() + (4 * q + r) * row_bytes(t, cols), want.data(), cols);
          for (int64_t c = 0; c < 128 * ng; ++c)
            ASSERT_EQ(out[r * ld + c], want[128 * g0 + c])
                << dtype_name(t) << " quad " << q << " row " << r << " groups " << g0 << "+" << ng << " col " << c;
          EXPECT_EQ(out[r * ld + 128 * ng], -1.0f) << "wrote past its columns";
        }
      }
  }
}

// q4_1's, q5_0's and q5_1's layout: q4_0's quants (qs at the end of each block), then
// per group 64 bytes of fifth bits (the 5-bit types), mask 2s + h's bit 4(4r + b) + i
// holding element 16h + 4s + i of row r's block b (the weight vector the kernels unpack
// at step s, from the low (h = 0) or high nibbles), then the group's 16 d and (q4_1,
// q5_1) its 16 m.
TEST(RowsX4, LegacyBytesSitWhereTheLayoutSays) {
  std::mt19937 rng(6);
  struct Shape {
    DType t;
    int bb, qh, bits, scales;  // block bytes, qh's offset in it (-1: none), bit and scale bytes per group
  };
  for (const Shape& sh : {Shape{DType::Q4_1, 20, -1, 0, 64}, Shape{DType::Q5_0, 22, 2, 64, 32},
                          Shape{DType::Q5_1, 24, 4, 64, 64}}) {
    const DType t = sh.t;
    const int64_t rows = 8, cols = 384, groups = cols / 128, nb = cols / 32;
    const auto src = random_rows(t, rows, cols, rng);
    std::vector<uint8_t> dst(src.size());
    repack_rows_x4(t, src.data(), rows, cols, dst.data());
    ASSERT_EQ(rows_x4_group_bit_bytes(t), sh.bits);
    ASSERT_EQ(rows_x4_group_scale_bytes(t), sh.scales);
    ASSERT_EQ(256 + sh.bits + sh.scales, 16 * sh.bb) << "a group holds its 16 blocks' bytes";
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t blk = 0; blk < nb; ++blk) {
        const uint8_t* b = src.data() + static_cast<size_t>(row * nb + blk) * sh.bb;  // d, (m), (qh), qs
        const uint8_t* quad = dst.data() + static_cast<size_t>(row / 4) * rows_x4_quad_bytes(t, cols);
        const int64_t r = row % 4, g = blk / 4, bi = blk % 4;
        for (int k = 0; k < 4; ++k)
          for (int j = 0; j < 4; ++j)
            ASSERT_EQ(quad[256 * g + 64 * k + 4 * (4 * r + bi) + j], b[sh.bb - 16 + 4 * k + j]) << dtype_name(t);
        for (int e = 0; e < 32 && sh.qh >= 0; ++e) {
          const int h = e / 16, s = (e % 16) / 4, i = e % 4;
          uint64_t mask;
          std::memcpy(&mask, quad + 256 * groups + 64 * g + 8 * (2 * s + h), 8);
          ASSERT_EQ((mask >> (4 * (4 * r + bi) + i)) & 1, static_cast<uint64_t>((b[sh.qh + e / 8] >> (e % 8)) & 1))
              << dtype_name(t) << " row " << row << " block " << blk << " element " << e;
        }
        const uint8_t* scales = quad + (256 + sh.bits) * groups + sh.scales * g;
        ASSERT_EQ(std::memcmp(scales + 2 * (4 * r + bi), b, 2), 0) << dtype_name(t);
        if (sh.scales == 64) {
          ASSERT_EQ(std::memcmp(scales + 32 + 2 * (4 * r + bi), b + 2, 2), 0) << dtype_name(t);
        }
      }
  }
}

// Q4_K's and Q5_K's layout: each sub-block's nibbles re-paired as q4_0 pairs them, at
// q4_0's places; each super-block's 12 scale bytes, d and dmin in row r's 16 bytes (after
// Q5_K's fifth bits); Q5_K's fifth bit of element e of row r's sub-block b of group g in
// mask 2s (e = 4s + i) or 2s + 1 (e = 16 + 4s + i) of the group's 64 bytes, at bit
// 4 (4r + b) + i.
template <class Block>
void expect_kquant_bytes_where_the_layout_says(DType t) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  std::mt19937 rng(6);
  const int64_t rows = 8, cols = 512, groups = cols / 128, n_sb = cols / 256;
  const auto src = random_rows(t, rows, cols, rng);
  std::vector<uint8_t> dst(src.size());
  repack_rows_x4(t, src.data(), rows, cols, dst.data());
  ASSERT_EQ(rows_x4_group_quant_bytes(t), 256);
  ASSERT_EQ(rows_x4_group_bit_bytes(t), kQ5 ? 64 : 0);
  for (int64_t row = 0; row < rows; ++row) {
    const uint8_t* quad = dst.data() + static_cast<size_t>(row / 4) * rows_x4_quad_bytes(t, cols);
    const int64_t r = row % 4;
    for (int64_t sb = 0; sb < n_sb; ++sb) {
      const auto& b = reinterpret_cast<const Block*>(src.data() + row * row_bytes(t, cols))[sb];
      const uint8_t* sc = quad + groups * (256 + (kQ5 ? 64 : 0)) + 64 * sb + 16 * r;
      ASSERT_EQ(std::memcmp(sc, b.scales, 12), 0) << dtype_name(t) << " row " << row << " super-block " << sb;
      ASSERT_EQ(std::memcmp(sc + 12, &b.d, 2), 0);
      ASSERT_EQ(std::memcmp(sc + 14, &b.dmin, 2), 0);
      for (int j = 0; j < 8; ++j)
        for (int e = 0; e < 32; ++e) {
          const uint8_t byte = b.qs[32 * (j / 2) + e];
          const int want = j % 2 ? byte >> 4 : byte & 0x0f;
          const int64_t blk = 8 * sb + j, g = blk / 4, bi = blk % 4, i = e % 16;  // q4_0's byte i of the block
          const uint8_t got_byte = quad[256 * g + 64 * (i / 4) + 4 * (4 * r + bi) + i % 4];
          ASSERT_EQ(e < 16 ? got_byte & 0x0f : got_byte >> 4, want)
              << dtype_name(t) << " row " << row << " sub-block " << blk << " element " << e;
          if constexpr (kQ5) {
            uint64_t mask;
            std::memcpy(&mask, quad + groups * 256 + 64 * g + 8 * (2 * ((e % 16) / 4) + e / 16), 8);
            ASSERT_EQ((mask >> (4 * (4 * r + bi) + e % 4)) & 1, static_cast<uint64_t>((b.qh[e] >> j) & 1))
                << "q5_k fifth bit: row " << row << " sub-block " << blk << " element " << e;
          }
        }
    }
  }
}

TEST(RowsX4, KquantBytesSitWhereTheLayoutSays) {
  expect_kquant_bytes_where_the_layout_says<BlockQ4_K>(DType::Q4_K);
  expect_kquant_bytes_where_the_layout_says<BlockQ5_K>(DType::Q5_K);
}

// Q4_K, Q5_K and Q6_K: back to the file's blocks (whole rows and a span of super-blocks), the
// load-time repack against the reference, and prefill's dequantisation against
// dequantize_row (exactly), from any group on.
TEST(RowsX4, KquantRoundTripRepackAndDequant) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4, 256}, {12, 768}, {8, 2048}}) {
      const size_t rb = row_bytes(t, cols);
      std::vector<float> vals(static_cast<size_t>(rows * cols));
      for (auto& v : vals) v = uni(rng);
      std::vector<uint8_t> src(rb * static_cast<size_t>(rows)), dst(src.size()), fast(src.size());
      for (int64_t r = 0; r < rows; ++r) quantize_row(t, vals.data() + r * cols, src.data() + r * rb, cols);
      repack_rows_x4(t, src.data(), rows, cols, dst.data());
      cpu::rows_x4_repack(t, src.data(), rows, cols, fast.data());
      EXPECT_EQ(fast, dst) << dtype_name(t) << " " << rows << "x" << cols;
      const int64_t nb = cols / 256;
      std::vector<uint8_t> back(rb);
      for (int64_t row = 0; row < rows; ++row) {
        rows_x4_row_blocks(t, dst.data(), cols, row, 0, nb, back.data());
        ASSERT_EQ(std::memcmp(back.data(), src.data() + row * rb, rb), 0) << rows << "x" << cols << " row " << row;
        if (nb > 2) {
          rows_x4_row_blocks(t, dst.data(), cols, row, 1, nb - 2, back.data());
          ASSERT_EQ(std::memcmp(back.data(), src.data() + row * rb + static_cast<size_t>(dtype_info(t).type_size), (nb - 2) * static_cast<size_t>(dtype_info(t).type_size)), 0);
        }
      }
      const int64_t groups = cols / 128, ld = cols + 16;
      std::vector<float> want(static_cast<size_t>(cols));
      for (int64_t q = 0; q < rows / 4; ++q)
        for (const auto& [g0, ng] : {std::pair<int64_t, int64_t>{0, groups}, {1, groups - 1}, {groups - 1, 1}}) {
          std::vector<float> out(static_cast<size_t>(4 * ld), -1.0f);
          cpu::rows_x4_dequant_quad(t, dst.data() + q * rows_x4_quad_bytes(t, cols), cols, g0, ng,
                                    out.data(), ld);
          for (int r = 0; r < 4; ++r) {
            dequantize_row(t, src.data() + (4 * q + r) * rb, want.data(), cols);
            for (int64_t c = 0; c < 128 * ng; ++c)
              ASSERT_EQ(out[r * ld + c], want[128 * g0 + c]) << "quad " << q << " row " << r << " groups " << g0 << "+" << ng;
            EXPECT_EQ(out[r * ld + 128 * ng], -1.0f) << "wrote past its columns";
          }
        }
    }
  }
}

TEST(RowsX4, ShapesAndGuards) {
  EXPECT_TRUE(rows_x4_fits(4, 128));
  EXPECT_FALSE(rows_x4_fits(6, 128));
  EXPECT_FALSE(rows_x4_fits(8, 160));  // a tail of blocks after the last group
  EXPECT_FALSE(rows_x4_fits(0, 128));
  EXPECT_TRUE(rows_x4_supports(DType::Q4_0));
  EXPECT_TRUE(rows_x4_supports(DType::Q8_0));
  EXPECT_TRUE(rows_x4_supports(DType::Q5_0));
  EXPECT_TRUE(rows_x4_supports(DType::Q4_1));
  EXPECT_TRUE(rows_x4_supports(DType::Q5_1));
  EXPECT_TRUE(rows_x4_supports(DType::IQ4_NL));
  EXPECT_TRUE(rows_x4_supports(DType::IQ4_XS));
  EXPECT_FALSE(rows_x4_supports(DType::MXFP4));
  EXPECT_FALSE(rows_x4_supports(DType::F16)) << "no interleaved float layout";
  EXPECT_TRUE(rows_x4_supports(DType::Q4_K));
  EXPECT_TRUE(rows_x4_supports(DType::Q5_K));
  EXPECT_TRUE(rows_x4_supports(DType::Q6_K));
  EXPECT_FALSE(rows_x4_supports(DType::Q3_K));
  std::vector<uint8_t> buf(6 * row_bytes(DType::Q8_0, 128));
  EXPECT_THROW(repack_rows_x4(DType::Q4_0, buf.data(), 6, 128, buf.data()), std::invalid_argument);
  EXPECT_THROW(repack_rows_x4(DType::F32, buf.data(), 4, 128, buf.data() + 2048), std::invalid_argument);
  // The kernels refuse an interleaved matrix of a type or shape the layout cannot take.
  std::vector<float> x(128), y(6);
  EXPECT_THROW(cpu::matvec(DType::F16, buf.data(), 4, 128, x.data(), y.data(), nullptr, RowLayout::rows_x4),
               std::invalid_argument);
  EXPECT_THROW(cpu::matvec(DType::Q8_0, buf.data(), 6, 128, x.data(), y.data(), nullptr, RowLayout::rows_x4),
               std::invalid_argument);
  // The CPU backend chooses the layout only where it fits and its kernels run.
  const WeightPlacer* p = testing::cpu_placer();
  EXPECT_EQ(p->layout_for(DType::Q4_0, 8, 256), cpu::q4_vnni_enabled() ? RowLayout::rows_x4 : RowLayout::gguf);
  EXPECT_EQ(p->layout_for(DType::Q4_0, 6, 256), RowLayout::gguf);
  EXPECT_EQ(p->layout_for(DType::Q6_K, 8, 256), RowLayout::gguf);
  // Q4_K only where it meets int8 activations: its interleaved kernels are int8's.
  EXPECT_EQ(p->layout_for(DType::Q4_K, 8, 256), RowLayout::gguf) << "the test placer runs int16 activations";
  EXPECT_EQ(p->layout_for(DType::Q5_K, 8, 256), RowLayout::gguf);
  EXPECT_EQ(p->layout_for(DType::Q5_0, 8, 256), RowLayout::gguf);
  const CpuBackend auto_backend(static_cast<ThreadPool*>(nullptr), true, ActivationPrecision::Auto);
  EXPECT_EQ(auto_backend.layout_for(DType::Q4_K, 8, 256), cpu::q4_vnni_enabled() ? RowLayout::rows_x4 : RowLayout::gguf);
  EXPECT_EQ(auto_backend.layout_for(DType::Q5_K, 8, 256), cpu::q4_vnni_enabled() ? RowLayout::rows_x4 : RowLayout::gguf);
  EXPECT_EQ(auto_backend.layout_for(DType::Q5_0, 8, 256), cpu::q4_vnni_enabled() ? RowLayout::rows_x4 : RowLayout::gguf);
  EXPECT_EQ(auto_backend.layout_for(DType::Q5_1, 8, 256), cpu::q4_vnni_enabled() ? RowLayout::rows_x4 : RowLayout::gguf);
  EXPECT_EQ(p->layout_for(DType::Q4_1, 8, 256), RowLayout::gguf) << "int8 kernels only";
  EXPECT_EQ(p->layout_for(DType::F32, 8, 256), RowLayout::gguf);
  EXPECT_TRUE(dtype_is_file_type(DType::Q4_0));
  EXPECT_TRUE(dtype_is_file_type(DType::Q8_0));
}

}  // namespace
}  // namespace moeflow
