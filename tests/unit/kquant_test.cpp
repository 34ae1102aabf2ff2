// k-quants (tensor/kquants.h): dequantisation against a per-weight decoder written from
// the format's definition, quantisation's round trip and rounding error.
#include "tensor/kquants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/iquants.h"

namespace moeflow {
namespace {

const DType kKquants[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Weight i of the block at p, decoded one weight at a time straight from ggml's layout
// (byte offsets as in ggml-common.h: block_q2_K = scales[16] qs[64] d dmin; block_q3_K =
// hmask[32] qs[64] scales[12] d; block_q4_K = d dmin scales[12] qs[128]; block_q5_K = d
// dmin scales[12] qh[32] qs[128]; block_q6_K = ql[128] qh[64] scales[16] d).
float reference_weight(DType t, const uint8_t* p, int i) {
  const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
  switch (t) {
    case DType::Q2_K: {
      const float d = fp16_to_fp32(u16(p + 80)), dmin = fp16_to_fp32(u16(p + 82));
      const uint8_t sm = p[i / 16];
      const int q = (p[16 + 32 * half + l] >> (2 * quarter)) & 3;
      return (d * static_cast<float>(sm & 15)) * static_cast<float>(q) - dmin * static_cast<float>(sm >> 4);
    }
    case DType::Q3_K: {
      const uint8_t* sc = p + 96;
      const float d = fp16_to_fp32(u16(p + 108));
      const int j = i / 16;
      const int low = j < 8 ? (sc[j] & 15) : (sc[j - 8] >> 4);
      const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
      const int s = (low | (high << 4)) - 32;
      const int q = ((p[32 + 32 * half + l] >> (2 * quarter)) & 3) + 4 * ((p[l] >> (4 * half + quarter)) & 1);
      return (d * static_cast<float>(s)) * static_cast<float>(q - 4);
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const float d = fp16_to_fp32(u16(p)), dmin = fp16_to_fp32(u16(p + 2));
      const uint8_t* sc = p + 4;
      const int j = i / 32;
      int s, m;
      if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
      } else {
        s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      const uint8_t* qs = p + (t == DType::Q4_K ? 16 : 48);
      const uint8_t byte = qs[32 * (i / 64) + l];
      int q = (i % 64) < 32 ? (byte & 15) : (byte >> 4);
      if (t == DType::Q5_K) q += 16 * ((p[16 + l] >> (i / 32)) & 1);
      return (d * static_cast<float>(s)) * static_cast<float>(q) - dmin * static_cast<float>(m);
    }
    case DType::Q6_K: {
      const float d = fp16_to_fp32(u16(p + 208));
      const auto sc = static_cast<int8_t>(p[192 + i / 16]);
      const uint8_t lb = p[64 * half + 32 * (quarter % 2) + l];
      const int q = ((quarter < 2 ? (lb & 15) : (lb >> 4)) | (((p[128 + 32 * half + l] >> (2 * quarter)) & 3) << 4)) - 32;
      return (d * static_cast<float>(sc)) * static_cast<float>(q);
    }
    default:
      return NAN;
  }
}

// Random blocks: every byte random except the f16 super-block scales, drawn as finite
// values of a sensible range (a random f16 could be inf or nan).
std::vector<uint8_t> random_blocks(DType t, int nb, uint32_t seed) {
  const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
  std::vector<uint8_t> v(bs * static_cast<size_t>(nb));
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int k = 0; k < nb; ++k) {
    uint8_t* p = v.data() + bs * static_cast<size_t>(k);
    auto put = [&](size_t off) {
      const uint16_t h = fp32_to_fp16(scale(rng));
      p[off] = static_cast<uint8_t>(h);
      p[off + 1] = static_cast<uint8_t>(h >> 8);
    };
    switch (t) {
      case DType::Q2_K: put(80); put(82); break;
      case DType::Q3_K: put(108); break;
      case DType::Q4_K: case DType::Q5_K: put(0); put(2); break;
      case DType::Q6_K: put(208); break;
      default: break;
    }
  }
  return v;
}

TEST(Kquant, FormatsAndGgmlIds) {
  const int ids[] = {10, 11, 12, 13, 14};
  const int sizes[] = {84, 110, 144, 176, 210};
  const char* names[] = {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
  for (int k = 0; k < 5; ++k) {
    DType t;
    ASSERT_TRUE(dtype_from_ggml(static_cast<uint32_t>(ids[k]), t));
    EXPECT_EQ(t, kKquants[k]);
    EXPECT_EQ(dtype_info(t).block_size, 256);
    EXPECT_EQ(dtype_info(t).type_size, sizes[k]);
    EXPECT_STREQ(dtype_name(t), names[k]);
    DType back;
    ASSERT_TRUE(dtype_from_name(names[k], back));
    EXPECT_EQ(back, t);
    EXPECT_TRUE(dtype_is_quantized(t));
    EXPECT_TRUE(dtype_is_file_type(t));
    EXPECT_TRUE(dtype_is_kquant(t));
    EXPECT_EQ(row_bytes(t, 4096), static_cast<size_t>(16 * sizes[k]));
    EXPECT_THROW(row_bytes(t, 128), std::invalid_argument);  // not whole super-blocks
  }
  EXPECT_FALSE(dtype_is_kquant(DType::Q4_0));
}

TEST(Kquant, DequantizeMatchesDefinitionExactly) {
  constexpr int kBlocks = 64;
  for (DType t : kKquants) {
    const std::vector<uint8_t> blocks = random_blocks(t, kBlocks, 1234u + static_cast<uint32_t>(t));
    std::vector<float> got(kBlocks * 256);
    dequantize_row(t, blocks.data(), got.data(), kBlocks * 256);
    double max_err = 0;
    for (int b = 0; b < kBlocks; ++b)
      for (int i = 0; i < 256; ++i) {
        const float want = reference_weight(t, blocks.data() + static_cast<size_t>(b) * dtype_info(t).type_size, i);
        max_err = std::max(max_err, static_cast<double>(std::fabs(got[static_cast<size_t>(b) * 256 + i] - want)));
      }
    std::printf("%s: dequantize_row vs definition, %d random blocks: max |error| %g\n", dtype_name(t), kBlocks, max_err);
    EXPECT_EQ(max_err, 0.0) << dtype_name(t);
  }
}

double rms(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

double round_trip_rms(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  std::vector<float> y(x.size());
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  return rms(x, y);
}

// Quantisation error on uniform and Gaussian data, relative to the data's RMS. The
// k-quants must beat q4_0 at 4 bits and up, and rank by bits per weight.
TEST(Kquant, RoundingErrorRanksByBits) {
  constexpr int64_t n = 256 * 256;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int dist = 0; dist < 2; ++dist) {
    std::vector<float> x(n);
    for (auto& v : x) v = dist == 0 ? uni(rng) : gauss(rng);
    const double x_rms = rms(x, std::vector<float>(n, 0.0f));
    double e[5];
    const double q4_0 = round_trip_rms(DType::Q4_0, x) / x_rms, q8_0 = round_trip_rms(DType::Q8_0, x) / x_rms;
    for (int k = 0; k < 5; ++k) e[k] = round_trip_rms(kKquants[k], x) / x_rms;
    std::printf("%s data, RMS error / RMS: q2_k %.4f q3_k %.4f q4_k %.4f q5_k %.4f q6_k %.4f | q4_0 %.4f q8_0 %.4f\n",
                dist == 0 ? "uniform" : "gaussian", e[0], e[1], e[2], e[3], e[4], q4_0, q8_0);
    EXPECT_LT(e[2], q4_0);  // q4_k (4.5 bits) below q4_0 (4.5 bits)
    for (int k = 1; k < 5; ++k) EXPECT_LT(e[k], e[k - 1]) << dtype_name(kKquants[k]);
    EXPECT_LT(e[4], 2.0 * q8_0 + 0.02);  // q6_k within reach of q8_0
    EXPECT_LT(e[0], 0.5);
  }
}

// Quantising what was dequantised reproduces the same weights closely (the scale search
// finds the grid the values lie on, or one as good).
TEST(Kquant, RequantizingDequantizedWeightsIsNearlyLossless) {
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (DType t : kKquants) {
    std::vector<float> x(256 * 16);
    for (auto& v : x) v = gauss(rng);
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
    std::vector<float> once(x.size()), twice(x.size());
    quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
    dequantize_row(t, q.data(), once.data(), static_cast<int64_t>(x.size()));
    const double first = rms(x, once);
    quantize_row(t, once.data(), q.data(), static_cast<int64_t>(x.size()));
    dequantize_row(t, q.data(), twice.data(), static_cast<int64_t>(x.size()));
    const double second = rms(once, twice);
    std::printf("%s: first quantisation RMS error %.5f, requantised %.5f\n", dtype_name(t), first, second);
    EXPECT_LT(second, 0.5 * first) << dtype_name(t);
  }
}

TEST(Kquant, ZeroAndConstantRows) {
  for (DType t : kKquants) {
    std::vector<float> zero(512, 0.0f), c(512, 0.75f), y(512);
    std::vector<uint8_t> q(row_bytes(t, 512));
    quantize_row(t, zero.data(), q.data(), 512);
    dequantize_row(t, q.data(), y.data(), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
    quantize_row(t, c.data(), q.data(), 512);
    dequantize_row(t, q.data(), y.data(), 512);
    for (float v : y) ASSERT_NEAR(v, 0.75f, 0.75f * 0.02f) << dtype_name(t);
  }
}

// IQ4_NL / IQ4_XS: weight i decoded from the definition (block_iq4_nl = d qs[16];
// block_iq4_xs = d scales_h scales_l[4] qs[128]; levels -127 .. 113).
float reference_iq4(DType t, const uint8_t* p, int i) {
  static const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const float d = fp16_to_fp32(u16(p));
  if (t == DType::IQ4_NL) {
    const uint8_t q = p[2 + i % 16];
    return d * static_cast<float>(levels[i < 16 ? (q & 15) : (q >> 4)]);
  }
  const int ib = i / 32, j = i % 32;
  const int scales_h = u16(p + 2);
  const int ls = ((p[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
  const uint8_t q = p[8 + 16 * ib + j % 16];
  return (d * static_cast<float>(ls - 32)) * static_cast<float>(levels[j < 16 ? (q & 15) : (q >> 4)]);
}

// MXFP4 weight i of a block (block_mxfp4 = e qs[16]; scale 2^(e - 128); doubled E2M1 levels).
float reference_mxfp4(const uint8_t* p, int i) {
  static const int levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const uint8_t q = p[1 + i % 16];
  return static_cast<float>(std::ldexp(1.0, p[0] - 128)) * static_cast<float>(levels[i < 16 ? (q & 15) : (q >> 4)]);
}

TEST(Iquant, Mxfp4) {
  DType t;
  ASSERT_TRUE(dtype_from_ggml(39, t));
  EXPECT_EQ(t, DType::MXFP4);
  EXPECT_EQ(dtype_info(t).block_size, 32);
  EXPECT_EQ(dtype_info(t).type_size, 17);
  std::mt19937 rng(5);
  std::vector<uint8_t> blocks(17 * 512);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng());
  std::vector<float> got(32 * 512);
  dequantize_row(t, blocks.data(), got.data(), 32 * 512);
  double max_err = 0;
  for (int i = 0; i < 32 * 512; ++i)
    max_err = std::max(max_err, static_cast<double>(std::fabs(got[i] - reference_mxfp4(blocks.data() + 17 * (i / 32), i % 32))));
  std::printf("mxfp4: dequantize_row vs definition, 512 random blocks (exponents 0..255): max |error| %g\n", max_err);
  EXPECT_EQ(max_err, 0.0);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(256 * 64);
  for (auto& v : x) v = gauss(rng);
  const double x_rms = rms(x, std::vector<float>(x.size(), 0.0f));
  const double e = round_trip_rms(t, x) / x_rms, q40 = round_trip_rms(DType::Q4_0, x) / x_rms;
  std::printf("gaussian data, RMS error / RMS: mxfp4 %.4f | q4_0 %.4f\n", e, q40);
  EXPECT_LT(e, 2.0 * q40);  // 4.25 bits with a power-of-two scale: a little coarser than q4_0
}

TEST(Iquant, FormatsDequantizationAndError) {
  DType t;
  ASSERT_TRUE(dtype_from_ggml(20, t));
  EXPECT_EQ(t, DType::IQ4_NL);
  EXPECT_EQ(dtype_info(t).block_size, 32);
  EXPECT_EQ(dtype_info(t).type_size, 18);
  ASSERT_TRUE(dtype_from_ggml(23, t));
  EXPECT_EQ(t, DType::IQ4_XS);
  EXPECT_EQ(dtype_info(t).block_size, 256);
  EXPECT_EQ(dtype_info(t).type_size, 136);
  ASSERT_TRUE(dtype_from_name("iq4_xs", t));
  EXPECT_TRUE(dtype_is_quantized(t));
  EXPECT_FALSE(dtype_is_kquant(t));
  std::mt19937 rng(99);
  for (DType type : {DType::IQ4_NL, DType::IQ4_XS}) {
    const int n = 256 * 32;
    const size_t bs = static_cast<size_t>(dtype_info(type).type_size);
    const int per_block = static_cast<int>(dtype_info(type).block_size);
    std::vector<uint8_t> blocks(row_bytes(type, n));
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (size_t k = 0; k < blocks.size() / bs; ++k) {  // finite f16 scales
      const uint16_t h = fp32_to_fp16(scale(rng));
      blocks[k * bs] = static_cast<uint8_t>(h);
      blocks[k * bs + 1] = static_cast<uint8_t>(h >> 8);
    }
    std::vector<float> got(n);
    dequantize_row(type, blocks.data(), got.data(), n);
    double max_err = 0;
    for (int i = 0; i < n; ++i)
      max_err = std::max(max_err, static_cast<double>(std::fabs(
                                      got[i] - reference_iq4(type, blocks.data() + bs * static_cast<size_t>(i / per_block), i % per_block))));
    std::printf("%s: dequantize_row vs definition, %d random weights: max |error| %g\n", dtype_name(type), n, max_err);
    EXPECT_EQ(max_err, 0.0);
  }
  for (int dist = 0; dist < 2; ++dist) {
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> x(256 * 256);
    for (auto& v : x) v = dist == 0 ? uni(rng) : gauss(rng);
    const double x_rms = rms(x, std::vector<float>(x.size(), 0.0f));
    const double nl = round_trip_rms(DType::IQ4_NL, x) / x_rms, xs = round_trip_rms(DType::IQ4_XS, x) / x_rms;
    const double q40 = round_trip_rms(DType::Q4_0, x) / x_rms, q4k = round_trip_rms(DType::Q4_K, x) / x_rms;
    std::printf("%s data, RMS error / RMS: iq4_nl %.4f iq4_xs %.4f | q4_0 %.4f q4_k %.4f\n",
                dist == 0 ? "uniform" : "gaussian", nl, xs, q40, q4k);
    if (dist == 1) {  // the non-linear levels fit bell-shaped weights, not uniform ones
      EXPECT_LT(nl, q40);
      EXPECT_LT(xs, q40);
    }
    EXPECT_LT(nl, 1.5 * q40);
    EXPECT_LT(xs, 1.5 * q40);
  }
}

}  // namespace
}  // namespace moeflow
