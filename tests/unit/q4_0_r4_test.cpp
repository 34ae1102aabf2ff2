// The interleaved q4_0 layout (tensor/q4_0_r4.h): byte positions as documented, the
// round trip to GGUF's blocks, and the guards that keep it out of files and rows.
#include "tensor/q4_0_r4.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "format/error.h"
#include "format/gguf.h"
#include "kernels/cpu/q4_vnni.h"
#include "tensor/dtype.h"

namespace moeflow {
namespace {

// rows x cols q4_0 blocks with every byte distinct enough to catch a misplaced one.
std::vector<BlockQ4_0> random_blocks(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<BlockQ4_0> b(static_cast<size_t>(rows * cols / 32));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& blk : b) {
    blk.d = static_cast<uint16_t>(byte(rng) | byte(rng) << 8);
    for (auto& q : blk.qs) q = static_cast<uint8_t>(byte(rng));
  }
  return b;
}

TEST(Q4R4, BytesSitWhereTheLayoutSays) {
  std::mt19937 rng(3);
  const int64_t rows = 8, cols = 256, groups = cols / 128, nb = cols / 32;
  const auto src = random_blocks(rows, cols, rng);
  std::vector<uint8_t> dst(src.size() * sizeof(BlockQ4_0));
  repack_q4_0_r4(src.data(), rows, cols, dst.data());
  const size_t quad_bytes = q4_0_r4_quad_bytes(cols);
  ASSERT_EQ(quad_bytes, 4 * row_bytes(DType::Q4_0, cols));
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t blk = 0; blk < nb; ++blk) {
      const BlockQ4_0& b = src[static_cast<size_t>(row * nb + blk)];
      const uint8_t* quad = dst.data() + static_cast<size_t>(row / 4) * quad_bytes;
      const int64_t r = row % 4, g = blk / 4, bi = blk % 4;
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 4; ++j)
          ASSERT_EQ(quad[256 * g + 64 * k + 4 * (4 * r + bi) + j], b.qs[4 * k + j]) << row << " " << blk;
      uint16_t d;
      std::memcpy(&d, quad + 256 * groups + 32 * g + 2 * (4 * r + bi), 2);
      ASSERT_EQ(d, b.d) << row << " " << blk;
    }
}

TEST(Q4R4, RowBlocksRebuildEveryBlock) {
  std::mt19937 rng(5);
  for (int64_t rows : {4, 12}) {
    for (int64_t cols : {128, 384, 2048}) {
      const auto src = random_blocks(rows, cols, rng);
      std::vector<uint8_t> dst(src.size() * sizeof(BlockQ4_0));
      repack_q4_0_r4(src.data(), rows, cols, dst.data());
      const int64_t nb = cols / 32;
      std::vector<BlockQ4_0> back(static_cast<size_t>(nb));
      for (int64_t row = 0; row < rows; ++row) {
        q4_0_r4_row_blocks(dst.data(), cols, row, 0, nb, back.data());
        ASSERT_EQ(std::memcmp(back.data(), src.data() + row * nb, back.size() * sizeof(BlockQ4_0)), 0)
            << rows << "x" << cols << " row " << row;
        // A span in the middle (prefill's tiles start at any multiple of 32 columns).
        q4_0_r4_row_blocks(dst.data(), cols, row, 1, nb - 2, back.data());
        ASSERT_EQ(std::memcmp(back.data(), src.data() + row * nb + 1, (nb - 2) * sizeof(BlockQ4_0)), 0);
      }
    }
  }
}

// Prefill's unpacking of a quad's groups (AVX-512 shuffles where the CPU has them).
TEST(Q4R4, UnpackQuadMatchesRowBlocks) {
  std::mt19937 rng(9);
  const int64_t rows = 8, cols = 768, nb = cols / 32;
  const auto src = random_blocks(rows, cols, rng);
  std::vector<uint8_t> dst(src.size() * sizeof(BlockQ4_0));
  repack_q4_0_r4(src.data(), rows, cols, dst.data());
  for (int64_t q = 0; q < rows / 4; ++q)
    for (const auto& [g0, ng] : {std::pair<int64_t, int64_t>{0, 6}, {2, 3}, {5, 1}}) {
      std::vector<BlockQ4_0> out(static_cast<size_t>(16 * ng));
      cpu::q4_r4_unpack_quad(dst.data() + q * q4_0_r4_quad_bytes(cols), cols, g0, ng, out.data());
      for (int r = 0; r < 4; ++r)
        ASSERT_EQ(std::memcmp(out.data() + r * 4 * ng, src.data() + (4 * q + r) * nb + 4 * g0, 4 * ng * sizeof(BlockQ4_0)), 0)
            << "quad " << q << " row " << r << " groups " << g0 << "+" << ng;
    }
}

TEST(Q4R4, ShapesAndGuards) {
  EXPECT_TRUE(q4_0_r4_fits(4, 128));
  EXPECT_FALSE(q4_0_r4_fits(6, 128));
  EXPECT_FALSE(q4_0_r4_fits(8, 160));  // a tail of blocks after the last group
  EXPECT_FALSE(q4_0_r4_fits(0, 128));
  std::vector<uint8_t> buf(6 * row_bytes(DType::Q4_0, 128));
  EXPECT_THROW(repack_q4_0_r4(buf.data(), 6, 128, buf.data()), std::invalid_argument);

  EXPECT_FALSE(dtype_is_file_type(DType::Q4_0_R4));
  EXPECT_TRUE(dtype_is_file_type(DType::Q4_0));
  EXPECT_EQ(dtype_in_file(DType::Q4_0_R4), DType::Q4_0);
  EXPECT_EQ(row_bytes(DType::Q4_0_R4, 256), row_bytes(DType::Q4_0, 256));
  DType t;
  EXPECT_FALSE(dtype_from_name("q4_0_r4", t)) << "not a type a user can ask a file to be written in";
  EXPECT_FALSE(dtype_from_ggml(static_cast<uint32_t>(DType::Q4_0_R4), t));
  std::vector<float> row(128);
  EXPECT_THROW(dequantize_row(DType::Q4_0_R4, buf.data(), row.data(), 128), std::invalid_argument);
  EXPECT_THROW(quantize_row(DType::Q4_0_R4, row.data(), buf.data(), 128), std::invalid_argument);

  gguf::GgufWriter w;
  try {
    w.add_tensor("t", {128, 4}, DType::Q4_0_R4, std::vector<uint8_t>(4 * row_bytes(DType::Q4_0, 128)));
    FAIL() << "the writer took an in-memory layout";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0_r4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow
