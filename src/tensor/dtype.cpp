#include "tensor/dtype.h"

#include "tensor/iq_lattice.h"
#include "tensor/iquants.h"
#include "tensor/kquants.h"
#include "tensor/legacy_quants.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moeflow {

namespace {

constexpr DTypeInfo kF32{"f32", 1, 4};
constexpr DTypeInfo kF16{"f16", 1, 2};
constexpr DTypeInfo kBF16{"bf16", 1, 2};
constexpr DTypeInfo kQ8_0{"q8_0", 32, 34};
constexpr DTypeInfo kQ4_0{"q4_0", 32, 18};
constexpr DTypeInfo kQ4_1{"q4_1", 32, sizeof(BlockQ4_1)};
constexpr DTypeInfo kQ5_0{"q5_0", 32, sizeof(BlockQ5_0)};
constexpr DTypeInfo kQ5_1{"q5_1", 32, sizeof(BlockQ5_1)};
constexpr DTypeInfo kQ2_K{"q2_k", 256, sizeof(BlockQ2_K)};
constexpr DTypeInfo kQ3_K{"q3_k", 256, sizeof(BlockQ3_K)};
constexpr DTypeInfo kQ4_K{"q4_k", 256, sizeof(BlockQ4_K)};
constexpr DTypeInfo kQ5_K{"q5_k", 256, sizeof(BlockQ5_K)};
constexpr DTypeInfo kQ6_K{"q6_k", 256, sizeof(BlockQ6_K)};
constexpr DTypeInfo kIQ4_NL{"iq4_nl", 32, sizeof(BlockIQ4_NL)};
constexpr DTypeInfo kIQ2_XXS{"iq2_xxs", 256, sizeof(BlockIQ2_XXS)};
constexpr DTypeInfo kIQ2_XS{"iq2_xs", 256, sizeof(BlockIQ2_XS)};
constexpr DTypeInfo kIQ2_S{"iq2_s", 256, sizeof(BlockIQ2_S)};
constexpr DTypeInfo kIQ3_XXS{"iq3_xxs", 256, sizeof(BlockIQ3_XXS)};
constexpr DTypeInfo kIQ3_S{"iq3_s", 256, sizeof(BlockIQ3_S)};
constexpr DTypeInfo kIQ1_S{"iq1_s", 256, sizeof(BlockIQ1_S)};
constexpr DTypeInfo kIQ1_M{"iq1_m", 256, sizeof(BlockIQ1_M)};
constexpr DTypeInfo kIQ4_XS{"iq4_xs", 256, sizeof(BlockIQ4_XS)};
constexpr DTypeInfo kMXFP4{"mxfp4", 32, sizeof(BlockMXFP4)};

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void check_blocks(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0 || n % info.block_size != 0) {
    throw std::invalid_argument(std::string("moeflow: element count ") + std::to_string(n) +
                                " is not a multiple of the " + info.name + " block size " +
                                std::to_string(info.block_size));
  }
}

}  // namespace

bool dtype_from_ggml(uint32_t ggml_type, DType& out) {
  switch (ggml_type) {
    case 0: out = DType::F32; return true;
    case 1: out = DType::F16; return true;
    case 2: out = DType::Q4_0; return true;
    case 3: out = DType::Q4_1; return true;
    case 6: out = DType::Q5_0; return true;
    case 7: out = DType::Q5_1; return true;
    case 8: out = DType::Q8_0; return true;
    case 10: out = DType::Q2_K; return true;
    case 11: out = DType::Q3_K; return true;
    case 12: out = DType::Q4_K; return true;
    case 13: out = DType::Q5_K; return true;
    case 14: out = DType::Q6_K; return true;
    case 16: out = DType::IQ2_XXS; return true;
    case 17: out = DType::IQ2_XS; return true;
    case 18: out = DType::IQ3_XXS; return true;
    case 19: out = DType::IQ1_S; return true;
    case 20: out = DType::IQ4_NL; return true;
    case 21: out = DType::IQ3_S; return true;
    case 22: out = DType::IQ2_S; return true;
    case 29: out = DType::IQ1_M; return true;
    case 23: out = DType::IQ4_XS; return true;
    case 39: out = DType::MXFP4; return true;
    case 30: out = DType::BF16; return true;
    default: return false;
  }
}

const DTypeInfo& dtype_info(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    case DType::Q8_0: return kQ8_0;
    case DType::Q4_0: return kQ4_0;
    case DType::Q4_1: return kQ4_1;
    case DType::Q5_0: return kQ5_0;
    case DType::Q5_1: return kQ5_1;
    case DType::Q2_K: return kQ2_K;
    case DType::Q3_K: return kQ3_K;
    case DType::Q4_K: return kQ4_K;
    case DType::Q5_K: return kQ5_K;
    case DType::Q6_K: return kQ6_K;
    case DType::IQ4_NL: return kIQ4_NL;
    case DType::IQ2_XXS: return kIQ2_XXS;
    case DType::IQ2_XS: return kIQ2_XS;
    case DType::IQ2_S: return kIQ2_S;
    case DType::IQ3_XXS: return kIQ3_XXS;
    case DType::IQ3_S: return kIQ3_S;
    case DType::IQ1_S: return kIQ1_S;
    case DType::IQ1_M: return kIQ1_M;
    case DType::IQ4_XS: return kIQ4_XS;
    case DType::MXFP4: return kMXFP4;
  }
  throw std::invalid_argument("moeflow: unknown dtype " +
                              std::to_string(static_cast<uint32_t>(t)));
}

const char* dtype_name(DType t) { return dtype_info(t).name; }

bool dtype_from_name(const std::string& name, DType& out) {
  static const DType all[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                              DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                              DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::IQ2_XXS, DType::IQ2_XS,
                              DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M};
  for (DType t : all) {
    if (name == dtype_info(t).name) {
      out = t;
      return true;
    }
  }
  return false;
}

bool dtype_is_quantized(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || dtype_is_legacy_quant(t) || dtype_is_kquant(t) ||
         t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::MXFP4 || dtype_is_lattice_iquant(t);
}

bool dtype_is_file_type(DType t) {
  DType back;
  return dtype_from_ggml(static_cast<uint32_t>(t), back) && back == t;
}

size_t row_bytes(DType t, int64_t n) {
  check_blocks(t, n);
  const DTypeInfo& info = dtype_info(t);
  return static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.type_size);
}

// ---------------------------------------------------------------------------------
// Scalar conversions.

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or nan
    if (a == 0x7f800000u) return sign | 0x7c00u;
    // NaN: keep the top payload bits, force quiet so it stays a NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                        // below 2^-14: half subnormal or zero
    if (a <= 0x33000000u) return sign;          // <= 2^-25 rounds (to even) to zero
    const uint32_t e = a >> 23;                 // 102..112
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;            // 14..24
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // Normal half: rebias exponent (127 -> 15), round the 13 dropped bits to even.
  uint32_t h = ((a - 0x38000000u) >> 13);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may bump exponent
  return static_cast<uint16_t>(sign | h);
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24, exact
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN, sign and payload top kept
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

// ---------------------------------------------------------------------------------
// Row conversion.

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_blocks(t, n);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::Q8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / 32; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < 32; ++j) dst[i * 32 + j] = d * static_cast<float>(b[i].qs[j]);
      }
      return;
    }
    case DType::Q4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / 32; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; ++j) {
          const int lo = (b[i].qs[j] & 0x0f) - 8;
          const int hi = (b[i].qs[j] >> 4) - 8;
          dst[i * 32 + j] = d * static_cast<float>(lo);
          dst[i * 32 + j + 16] = d * static_cast<float>(hi);
        }
      }
      return;
    }
    case DType::Q4_1: dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, n / 32); return;
    case DType::Q5_0: dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, n / 32); return;
    case DType::Q5_1: dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, n / 32); return;
    case DType::Q2_K: dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, n / kQK_K); return;
    case DType::Q3_K: dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, n / kQK_K); return;
    case DType::Q4_K: dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / kQK_K); return;
    case DType::Q5_K: dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, n / kQK_K); return;
    case DType::Q6_K: dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K); return;
    case DType::IQ4_NL: dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n / 32); return;
    case DType::IQ4_XS: dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n / 256); return;
    case DType::MXFP4: dequantize_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n / 32); return;
    case DType::IQ2_XXS: dequantize_iq2_xxs(static_cast<const BlockIQ2_XXS*>(src), dst, n / 256); return;
    case DType::IQ2_XS: dequantize_iq2_xs(static_cast<const BlockIQ2_XS*>(src), dst, n / 256); return;
    case DType::IQ2_S: dequantize_iq2_s(static_cast<const BlockIQ2_S*>(src), dst, n / 256); return;
    case DType::IQ3_XXS: dequantize_iq3_xxs(static_cast<const BlockIQ3_XXS*>(src), dst, n / 256); return;
    case DType::IQ3_S: dequantize_iq3_s(static_cast<const BlockIQ3_S*>(src), dst, n / 256); return;
    case DType::IQ1_S: dequantize_iq1_s(static_cast<const BlockIQ1_S*>(src), dst, n / 256); return;
    case DType::IQ1_M: dequantize_iq1_m(static_cast<const BlockIQ1_M*>(src), dst, n / 256); return;
  }
  throw std::invalid_argument("moeflow: dequantize_row: unknown dtype");
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_blocks(t, n);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::Q8_0: {
      BlockQ8_0* y = static_cast<BlockQ8_0*>(dst);
      for (int64_t i = 0; i < n / 32; ++i) {
        const float* x = src + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < 32; ++j) {
          y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
        }
      }
      return;
    }
    case DType::Q4_0: {
      BlockQ4_0* y = static_cast<BlockQ4_0*>(dst);
      for (int64_t i = 0; i < n / 32; ++i) {
        const float* x = src + i * 32;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; ++j) {
          const float v = x[j];
          if (amax < std::fabs(v)) {
            amax = std::fabs(v);
            max = v;
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < 16; ++j) {
          const int xi0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
          const int xi1 =
              std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
          y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
        }
      }
      return;
    }
    case DType::Q4_1: quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n / 32); return;
    case DType::Q5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n / 32); return;
    case DType::Q5_1: quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n / 32); return;
    case DType::Q2_K: quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n / kQK_K); return;
    case DType::Q3_K: quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n / kQK_K); return;
    case DType::Q4_K: quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n / kQK_K); return;
    case DType::Q5_K: quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n / kQK_K); return;
    case DType::Q6_K: quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQK_K); return;
    case DType::IQ4_NL: quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n / 32); return;
    case DType::IQ4_XS: quantize_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n / 256); return;
    case DType::MXFP4: quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), n / 32); return;
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::IQ1_M:
      throw std::invalid_argument(std::string("moeflow: no quantiser for ") + dtype_name(t) +
                                  " (moeflow reads it; llama-quantize writes it, with an importance matrix)");
  }
  throw std::invalid_argument("moeflow: quantize_row: unknown dtype");
}

}  // namespace moeflow
