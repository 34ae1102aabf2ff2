#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace moeflow {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent decoder: value = (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp(m, -24);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

TEST(DType, InfoAndNames) {
  EXPECT_EQ(dtype_info(DType::F32).type_size, 4);
  EXPECT_EQ(dtype_info(DType::F16).type_size, 2);
  EXPECT_EQ(dtype_info(DType::BF16).type_size, 2);
  EXPECT_EQ(dtype_info(DType::Q8_0).block_size, 32);
  EXPECT_EQ(dtype_info(DType::Q8_0).type_size, 34);
  EXPECT_EQ(dtype_info(DType::Q4_0).block_size, 32);
  EXPECT_EQ(dtype_info(DType::Q4_0).type_size, 18);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    DType back;
    ASSERT_TRUE(dtype_from_name(dtype_name(t), back));
    EXPECT_EQ(back, t);
    ASSERT_TRUE(dtype_from_ggml(static_cast<uint32_t>(t), back));
    EXPECT_EQ(back, t);
  }
  DType out;
  EXPECT_FALSE(dtype_from_name("tq1_0", out));
  EXPECT_FALSE(dtype_from_ggml(34, out));  // tq1_0
  EXPECT_FALSE(dtype_from_ggml(15, out));  // q8_K (no file holds it)
  EXPECT_TRUE(dtype_is_quantized(DType::Q8_0));
  EXPECT_TRUE(dtype_is_quantized(DType::Q4_0));
  EXPECT_FALSE(dtype_is_quantized(DType::BF16));
}

TEST(DType, RowBytes) {
  EXPECT_EQ(row_bytes(DType::F32, 7), 28u);
  EXPECT_EQ(row_bytes(DType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(DType::BF16, 4096), 8192u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 4096), 128u * 34u);
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(row_bytes(DType::Q4_0, 0), 0u);
  EXPECT_THROW(row_bytes(DType::Q8_0, 33), std::invalid_argument);
  EXPECT_THROW(row_bytes(DType::Q4_0, 16), std::invalid_argument);
  float buf[64] = {};
  uint8_t q[64];
  EXPECT_THROW(quantize_row(DType::Q8_0, buf, q, 31), std::invalid_argument);
  EXPECT_THROW(dequantize_row(DType::Q4_0, q, buf, 48), std::invalid_argument);
}

TEST(DType, Fp16SpecialValues) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);     // max half
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7bff);    // below the halfway point
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);     // tie rounds to even = inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // min normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // min subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp tie -> 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.0f, -24)), 0x03ff);  // max subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into normal
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  const uint16_t hn = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(hn & 0x7c00, 0x7c00);
  EXPECT_NE(hn & 0x03ff, 0);
  // A signalling NaN whose payload lives only in low bits must stay a NaN.
  const uint16_t hs = fp32_to_fp16(from_bits(0x7f800001u));
  EXPECT_EQ(hs & 0x7c00, 0x7c00);
  EXPECT_NE(hs & 0x03ff, 0);

  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7c00)));
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xfc00)) && fp16_to_fp32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));
}

TEST(DType, Fp16AllHalvesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const double ref = half_value(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << h;
    ASSERT_EQ(fp32_to_fp16(f), h) << h;
  }
}

// Every float in a sweep must go to the nearest half, ties to even.
TEST(DType, Fp16RoundingSweep) {
  std::mt19937 rng(7);
  int checked = 0;
  auto check = [&](uint32_t u) {
    const float f = from_bits(u);
    if (std::isnan(f)) return;
    const uint16_t h = fp32_to_fp16(f);
    const double v = f;
    const double hv = half_value(h);
    if (std::fabs(v) >= 65520.0) {
      ASSERT_TRUE(std::isinf(hv)) << u;
      return;
    }
    ASSERT_FALSE(std::isinf(hv)) << u;
    // Neighbours of h (same sign), toward and away from zero.
    const uint16_t mag = h & 0x7fff;
    const double err = std::fabs(hv - v);
    if (mag < 0x7bff) {
      const double up = half_value(static_cast<uint16_t>(h + 1));
      ASSERT_LE(err, std::fabs(up - v)) << u;
      if (err == std::fabs(up - v)) {
        ASSERT_EQ(h & 1, 0) << u;
      }
    }
    if (mag > 0) {
      const double dn = half_value(static_cast<uint16_t>(h - 1));
      ASSERT_LE(err, std::fabs(dn - v)) << u;
      if (err == std::fabs(dn - v)) {
        ASSERT_EQ(h & 1, 0) << u;
      }
    }
    ++checked;
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 9973) check(static_cast<uint32_t>(u));
  // Dense around the interesting exponents: subnormals, min normal, overflow.
  for (uint32_t e : {102u, 103u, 110u, 112u, 113u, 127u, 142u}) {
    for (int i = 0; i < 20000; ++i) check((e << 23) | (rng() & 0x807fffffu));
  }
  // Exact ties.
  for (int i = 0; i < 20000; ++i) check((rng() & 0xbfffe000u) | 0x1000u);
  EXPECT_GT(checked, 400000);
}

TEST(DType, Bf16) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00000001u)), 0x0000);  // tiny subnormal
  // NaNs stay NaNs, including ones whose payload is only in the low 16 bits.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fffffffu, 0xff800001u}) {
    const uint16_t b = fp32_to_bf16(from_bits(u));
    EXPECT_TRUE(std::isnan(bf16_to_fp32(b))) << std::hex << u;
    EXPECT_EQ(b & 0x8000, (u >> 16) & 0x8000);
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), h);
  }
  // Sweep: result is one of the two neighbours and the nearer one.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 7919) {
    const float f = from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f) || std::isinf(f)) continue;
    const uint16_t b = fp32_to_bf16(f);
    const uint32_t lo = static_cast<uint32_t>(u) & 0xffff0000u;
    const uint32_t rem = static_cast<uint32_t>(u) & 0xffffu;
    uint32_t expect = lo >> 16;
    if (rem > 0x8000u || (rem == 0x8000u && (expect & 1))) ++expect;
    ASSERT_EQ(b, expect) << u;
  }
}

// Known blocks, bytes worked out by hand.
TEST(DType, Q8_0HandBlock) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 0.0f;
  // amax = 127 -> d = 1 exactly (f16 0x3c00), id = 1, q = roundf(x) (half away from 0).
  x[0] = 127.0f;
  x[1] = -127.0f;
  x[2] = 2.5f;    // -> 3
  x[3] = -2.5f;   // -> -3
  x[4] = 0.49f;   // -> 0
  x[5] = -0.51f;  // -> -1
  x[6] = 100.4f;  // -> 100
  x[31] = 1.5f;   // -> 2
  BlockQ8_0 b;
  quantize_row(DType::Q8_0, x, &b, 32);
  uint8_t raw[34];
  std::memcpy(raw, &b, 34);
  EXPECT_EQ(raw[0], 0x00);  // d = 0x3c00 little endian
  EXPECT_EQ(raw[1], 0x3c);
  const int8_t expect_q[32] = {127, -127, 3, -3, 0, -1, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                               0,   0,    0, 0,  0, 0,  0,   0, 0, 0, 0, 0, 0, 0, 0, 2};
  for (int j = 0; j < 32; ++j) EXPECT_EQ(static_cast<int8_t>(raw[2 + j]), expect_q[j]) << j;
  float y[32];
  dequantize_row(DType::Q8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], static_cast<float>(expect_q[j]));

  // Second block: amax = 16 -> d = 16/127 -> f16 0x3008; q[j] = round((j-16) * 7.9375).
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  quantize_row(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3008);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], -119);  // -15 * 7.9375 = -119.0625
  EXPECT_EQ(b.qs[14], -16);  // -2 * 7.9375 = -15.875
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[17], 8);    // 7.9375
  EXPECT_EQ(b.qs[31], 119);  // 119.0625
  // All zeros: d = 0, q = 0.
  for (int j = 0; j < 32; ++j) x[j] = 0.0f;
  quantize_row(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], 0);
}

TEST(DType, Q4_0HandBlock) {
  float x[64];
  for (int j = 0; j < 64; ++j) x[j] = 0.0f;
  // Block 0: max (signed, largest |x|) = -8 -> d = 1 (0x3c00), id = 1,
  // q = min(15, (int8)(x + 8.5)).
  x[0] = -8.0f;   // 0
  x[1] = 7.0f;    // 15
  x[2] = 7.4f;    // (int)15.9 = 15
  x[3] = -0.6f;   // (int)7.9 = 7
  x[4] = 2.5f;    // 11
  x[16] = 3.0f;   // 11 (high nibble of qs[0])
  x[17] = -7.6f;  // (int)0.9 = 0
  x[31] = -1.0f;  // 7
  // Block 1: max = +8 -> d = -1 (0xbc00), id = -1: x = 8 -> 0, x = -8 -> 16 clamped 15.
  x[32] = 8.0f;
  x[33] = -8.0f;
  x[34] = 1.0f;   // -1 + 8.5 = 7.5 -> 7
  x[48] = -3.0f;  // 3 + 8.5 = 11.5 -> 11
  uint8_t raw[36];
  quantize_row(DType::Q4_0, x, raw, 64);
  const uint8_t expect0[18] = {0x00, 0x3c,
                               0xb0, 0x0f, 0x8f, 0x87, 0x8b, 0x88, 0x88, 0x88,
                               0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x78};
  const uint8_t expect1[18] = {0x00, 0xbc,
                               0xb0, 0x8f, 0x87, 0x88, 0x88, 0x88, 0x88, 0x88,
                               0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
  for (int j = 0; j < 18; ++j) EXPECT_EQ(raw[j], expect0[j]) << "block 0 byte " << j;
  for (int j = 0; j < 18; ++j) EXPECT_EQ(raw[18 + j], expect1[j]) << "block 1 byte " << j;
  float y[64];
  dequantize_row(DType::Q4_0, raw, y, 64);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(y[3], -1.0f);
  EXPECT_EQ(y[16], 3.0f);
  EXPECT_EQ(y[17], -8.0f);
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[32], 8.0f);   // d * (0 - 8) = -1 * -8
  EXPECT_EQ(y[33], -7.0f);  // clamped: d * (15 - 8)
  EXPECT_EQ(y[34], 1.0f);   // -1 * (7 - 8)
  EXPECT_EQ(y[48], -3.0f);  // -1 * (11 - 8)
}

TEST(DType, QuantizeErrorBounds) {
  std::mt19937 rng(123);
  const int64_t n = 32 * 512;
  std::vector<float> x(n), y(n);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    for (int dist = 0; dist < 3; ++dist) {
      // dist 0: uniform [-1,1]; 1: normal with outliers; 2: small magnitudes (f16 d subnormal).
      std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
      std::normal_distribution<float> nor(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i) {
        if (dist == 0) x[i] = uni(rng);
        else if (dist == 1) x[i] = nor(rng) * (i % 97 == 0 ? 20.0f : 1.0f);
        else x[i] = uni(rng) * 1e-4f;
      }
      std::vector<uint8_t> q(row_bytes(t, n));
      quantize_row(t, x.data(), q.data(), n);
      dequantize_row(t, q.data(), y.data(), n);
      double se = 0, sx = 0, max_ratio = 0;
      for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        double bound;
        switch (t) {
          case DType::F32: bound = 0; break;
          case DType::F16: bound = 0; break;  // per-element check below
          case DType::BF16: bound = 0; break;
          case DType::Q8_0: {
            // d/2 from rounding plus what storing d as f16 costs (|q| <= 127).
            const double d = amax / 127.0;
            const double dh = fp16_to_fp32(fp32_to_fp16(static_cast<float>(d)));
            bound = d / 2 + 127 * std::fabs(d - dh) + 1e-7 * amax;
            break;
          }
          case DType::Q4_0: {
            // Up to d where the largest value of the opposite sign is clamped to 7.
            const double d = amax / 8.0;
            const double dh = std::fabs(fp16_to_fp32(fp32_to_fp16(static_cast<float>(d))));
            bound = d + 8 * std::fabs(d - dh) + 1e-7 * amax;
            break;
          }
          default: FAIL() << "k-quants: kquant_test.cpp";
        }
        for (int j = 0; j < 32; ++j) {
          const int64_t i = b * 32 + j;
          const double e = std::fabs(static_cast<double>(x[i]) - y[i]);
          se += e * e;
          sx += static_cast<double>(x[i]) * x[i];
          if (t == DType::F32) {
            ASSERT_EQ(x[i], y[i]);
          } else if (t == DType::F16) {
            ASSERT_LE(e, std::max(std::fabs(x[i]) * std::ldexp(1.0, -11), std::ldexp(1.0, -25)));
          } else if (t == DType::BF16) {
            ASSERT_LE(e, std::fabs(x[i]) * std::ldexp(1.0, -8));
          } else {
            ASSERT_LE(e, bound) << dtype_name(t) << " block " << b << " j " << j;
            if (bound > 0) max_ratio = std::max(max_ratio, e / bound);
          }
        }
      }
      const double rel = std::sqrt(se / std::max(sx, 1e-300));
      std::printf("  %-5s dist %d: relative RMS error %.3e (max err / bound %.3f)\n",
                  dtype_name(t), dist, rel, max_ratio);
      if (t == DType::Q8_0 && dist == 0) {
        EXPECT_LT(rel, 0.01);
      }
      if (t == DType::Q4_0 && dist == 0) {
        EXPECT_LT(rel, 0.15);
      }
    }
  }
}

}  // namespace
}  // namespace moeflow
