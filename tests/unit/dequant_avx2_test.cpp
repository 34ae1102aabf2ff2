// The AVX2 dequantisers (dequant_avx2.h) against dequantize_row, bit for bit, on blocks
// of random bytes (every scale and quant pattern, subnormal, infinite and NaN scales
// included) and on quantised rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dequant_avx2.h"
#include "kernels/cpu/int8_avx2.h"
#include "tensor/dtype.h"
#include "float_vectors.h"

namespace moeflow::cpu {
namespace {

TEST(DequantAvx2, BitIdenticalToDequantizeRow) {
  if (!int8_avx2_enabled()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(71);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS,
                  DType::MXFP4}) {
    const int64_t n = 4 * 256;
    const size_t bytes = row_bytes(t, n);
    for (int trial = 0; trial < 2; ++trial) {
      std::vector<uint8_t> blocks(bytes);
      if (trial == 0) {
        for (auto& b : blocks) b = static_cast<uint8_t>(rng());
      } else {
        const std::vector<float> w = testing::random_vec(static_cast<size_t>(n), rng);
        quantize_row(t, w.data(), blocks.data(), n);
      }
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
      dequantize_row(t, blocks.data(), want.data(), n);
      ASSERT_TRUE(dequant_avx2(t, blocks.data(), n, got.data())) << dtype_name(t);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << dtype_name(t) << (trial == 0 ? ", random bytes" : ", quantised row");
    }
  }
  EXPECT_FALSE(dequant_avx2(DType::Q4_0, nullptr, 0, nullptr)) << "q4_0 has its own Highway path";
}

}  // namespace
}  // namespace moeflow::cpu
