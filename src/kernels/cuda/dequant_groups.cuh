// The weight types the CUDA kernels read, decoded eight consecutive elements at a
// time: a mat-vec's lane takes one group per step, so a warp's 32 lanes cover 256
// consecutive elements (a k-quant super-block, eight q4_0 / q8_0 blocks) and read the
// activation's 256 floats side by side, coalesced. Byte loads only: GGUF rows are
// 2-byte aligned at best.
//
// __host__ __device__ so that the same code runs on the CPU in the tests (dequant
// against tensor/dtype.h's dequantize_row, no GPU needed); the formats' facts are those
// of tensor/dtype.h and tensor/kquants.h.
#pragma once
#include <cstdint>

#include "base/host_device.h"
#include "tensor/dtype.h"
#include "tensor/iquants.h"
#include "tensor/kquants.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif


namespace moeflow::cuda {

MOEFLOW_HD float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24, exact
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
#endif
}

MOEFLOW_HD float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

MOEFLOW_HD uint16_t load_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);  // every caller's address is even
#else
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
#endif
}

// Eight bytes from an even address in four 16-bit loads (a quarter of the load
// instructions of byte loads; rows are 2-byte aligned, so nothing wider is safe).
MOEFLOW_HD void load8(const uint8_t* p, uint8_t* out) {
#if defined(__CUDA_ARCH__)
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t v = q[i];
    out[2 * i] = static_cast<uint8_t>(v);
    out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
  }
#else
  memcpy(out, p, 8);
#endif
}

// Eight bytes from any address, one at a time.
MOEFLOW_HD void load8_bytes(const uint8_t* p, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = p[i];
}

MOEFLOW_HD float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  memcpy(&f, &bits, 4);
  return f;
#endif
}

// float(v) for |v| < 2^22, exact, in an integer and a float add: v lands in the
// mantissa of 1.5 * 2^23. The GPU's int-to-float conversion runs at a quarter of its
// FMA rate, and a decoded weight needs one.
MOEFLOW_HD float small_int_to_float(int v) {
  return bits_to_float(0x4B400000u + static_cast<uint32_t>(v)) - 12582912.0f;
}

// A 16-entry int8 table packed eight to a word: device code cannot index a host array,
// so a level is looked up with a shift.
constexpr uint64_t pack_levels(const int8_t* t, int from) {
  uint64_t w = 0;
  for (int i = 7; i >= 0; --i) w = (w << 8) | static_cast<uint8_t>(t[from + i]);
  return w;
}
constexpr uint64_t kIq4Lo = pack_levels(kIq4Levels, 0), kIq4Hi = pack_levels(kIq4Levels, 8);
constexpr uint64_t kMxfp4Lo = pack_levels(kMxfp4Levels, 0), kMxfp4Hi = pack_levels(kMxfp4Levels, 8);
MOEFLOW_HD int table_level(uint64_t lo, uint64_t hi, int nibble) {
  return static_cast<int8_t>(static_cast<uint8_t>((nibble < 8 ? lo : hi) >> (8 * (nibble & 7))));
}

// Elements a group holds, and bytes a block of block_elems elements takes.
template <DType T> struct GroupTraits;
template <> struct GroupTraits<DType::F32> { static constexpr int kGroup = 8, kBlock = 1, kBlockBytes = 4; };
template <> struct GroupTraits<DType::F16> { static constexpr int kGroup = 8, kBlock = 1, kBlockBytes = 2; };
template <> struct GroupTraits<DType::BF16> { static constexpr int kGroup = 8, kBlock = 1, kBlockBytes = 2; };
template <> struct GroupTraits<DType::Q8_0> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 34; };
template <> struct GroupTraits<DType::Q4_0> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 18; };
template <> struct GroupTraits<DType::Q4_1> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 20; };
template <> struct GroupTraits<DType::Q5_0> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 22; };
template <> struct GroupTraits<DType::Q5_1> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 24; };
template <> struct GroupTraits<DType::Q2_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 84; };
template <> struct GroupTraits<DType::Q3_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 110; };
template <> struct GroupTraits<DType::Q4_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 144; };
template <> struct GroupTraits<DType::Q5_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 176; };
template <> struct GroupTraits<DType::Q6_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 210; };
template <> struct GroupTraits<DType::IQ4_NL> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 18; };
template <> struct GroupTraits<DType::IQ4_XS> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 136; };
template <> struct GroupTraits<DType::MXFP4> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 17; };

// Group g of a row (elements g * kGroup .. + kGroup) into out.
template <DType T> MOEFLOW_HD void decode_group(const uint8_t* row, int64_t g, float* out);

template <> MOEFLOW_HD void decode_group<DType::F32>(const uint8_t* row, int64_t g, float* out) {
#if defined(__CUDA_ARCH__)
  // Rows of f32 start 16-byte aligned on the device (resident copies and expert
  // buffers align every matrix), and a group is 32 bytes.
  const float4* p = reinterpret_cast<const float4*>(row + g * 32);
  const float4 a = p[0], b = p[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
#else
  memcpy(out, row + g * 32, 32);
#endif
}
template <> MOEFLOW_HD void decode_group<DType::F16>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* p = row + g * 16;
  for (int i = 0; i < 8; ++i) out[i] = half_bits_to_float(load_u16(p + 2 * i));
}
template <> MOEFLOW_HD void decode_group<DType::BF16>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* p = row + g * 16;
  for (int i = 0; i < 8; ++i) out[i] = bf16_bits_to_float(load_u16(p + 2 * i));
}
// q4_0 / q8_0: group g is the quarter g % 4 of block g / 4.
template <> MOEFLOW_HD void decode_group<DType::Q8_0>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 2) * 34;
  const float d = half_bits_to_float(load_u16(b));
  uint8_t q[8];
  load8(b + 2 + 8 * (g & 3), q);
  for (int i = 0; i < 8; ++i) out[i] = d * small_int_to_float(static_cast<int8_t>(q[i]));
}
template <> MOEFLOW_HD void decode_group<DType::Q4_0>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 2) * 18;
  const float d = half_bits_to_float(load_u16(b));
  const int part = static_cast<int>(g & 3);  // elements 8 part .. 8 part + 7: low nibbles, then high
  uint8_t q[8];
  load8(b + 2 + 8 * (part & 1), q);
  const int shift = part >= 2 ? 4 : 0;
  for (int i = 0; i < 8; ++i) out[i] = d * small_int_to_float(((q[i] >> shift) & 0x0f) - 8);
}

// Q4_1, Q5_0, Q5_1 (tensor/legacy_quants.h): q4_0's nibble order; the 5-bit types' high
// bits for elements 8 part .. 8 part + 7 are one byte of qh. Every offset is even.
template <DType T>
MOEFLOW_HD void decode_legacy_group(const uint8_t* row, int64_t g, float* out) {
  constexpr bool five = T != DType::Q4_1, with_min = T != DType::Q5_0;
  constexpr int qh_at = with_min ? 4 : 2, qs_at = GroupTraits<T>::kBlockBytes - 16;
  const uint8_t* b = row + (g >> 2) * GroupTraits<T>::kBlockBytes;
  const float d = half_bits_to_float(load_u16(b));
  const float m = with_min ? half_bits_to_float(load_u16(b + 2)) : 0.0f;
  const int part = static_cast<int>(g & 3);
  uint8_t q[8];
  load8(b + qs_at + 8 * (part & 1), q);
  const int shift = part >= 2 ? 4 : 0;
  const int high = five ? (load_u16(b + qh_at + (part >= 2 ? 2 : 0)) >> (8 * (part & 1))) & 0xff : 0;  // qh[part]
  for (int i = 0; i < 8; ++i) {
    const int v = ((q[i] >> shift) & 0x0f) | (((high >> i) & 1) << 4);
    out[i] = with_min ? d * small_int_to_float(v) + m : d * small_int_to_float(v - 16);
  }
}
template <> MOEFLOW_HD void decode_group<DType::Q4_1>(const uint8_t* row, int64_t g, float* out) {
  decode_legacy_group<DType::Q4_1>(row, g, out);
}
template <> MOEFLOW_HD void decode_group<DType::Q5_0>(const uint8_t* row, int64_t g, float* out) {
  decode_legacy_group<DType::Q5_0>(row, g, out);
}
template <> MOEFLOW_HD void decode_group<DType::Q5_1>(const uint8_t* row, int64_t g, float* out) {
  decode_legacy_group<DType::Q5_1>(row, g, out);
}

// k-quants: group g is elements e0 .. e0 + 7 of super-block g / 32, e0 = 8 * (g % 32);
// the eight share a sub-block and so one scale.
template <> MOEFLOW_HD void decode_group<DType::Q2_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 84;  // scales[16], qs[64], d, dmin
  const int e0 = 8 * static_cast<int>(g & 31), h = e0 >> 7, k = (e0 & 127) >> 5, l0 = e0 & 31;
  const int s = b[(e0 >> 4)];
  const float dl = half_bits_to_float(load_u16(b + 80)) * small_int_to_float(s & 0x0f);
  const float ml = half_bits_to_float(load_u16(b + 82)) * small_int_to_float(s >> 4);
  uint8_t qs[8];
  load8(b + 16 + 32 * h + l0, qs);
  for (int i = 0; i < 8; ++i) out[i] = dl * small_int_to_float((qs[i] >> (2 * k)) & 3) - ml;
}
template <> MOEFLOW_HD void decode_group<DType::Q3_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 110;  // hmask[32], qs[64], scales[12], d
  const int e0 = 8 * static_cast<int>(g & 31), h = e0 >> 7, k = (e0 & 127) >> 5, l0 = e0 & 31;
  const int j = e0 >> 4;
  const int scale = kq_scale_q3(b + 96, j);
  const float dl = half_bits_to_float(load_u16(b + 108)) * small_int_to_float(scale - 32);
  uint8_t qs[8], hm[8];
  load8(b + 32 + 32 * h + l0, qs);
  load8(b + l0, hm);
  for (int i = 0; i < 8; ++i) {
    const int q = ((qs[i] >> (2 * k)) & 3) | (((hm[i] >> (4 * h + k)) & 1) << 2);
    out[i] = dl * small_int_to_float(q - 4);
  }
}

template <> MOEFLOW_HD void decode_group<DType::Q4_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 144;  // d, dmin, scales[12], qs[128]
  const int e0 = 8 * static_cast<int>(g & 31), c = e0 >> 6, high = (e0 >> 5) & 1, l0 = e0 & 31;
  int sc, m;
  kq_scale_min_k4(b + 4, 2 * c + high, sc, m);
  const float d = half_bits_to_float(load_u16(b)) * small_int_to_float(sc);
  const float n = half_bits_to_float(load_u16(b + 2)) * small_int_to_float(m);
  uint8_t q[8];
  load8(b + 16 + 32 * c + l0, q);
  for (int i = 0; i < 8; ++i) out[i] = d * small_int_to_float(high ? q[i] >> 4 : q[i] & 0x0f) - n;
}
template <> MOEFLOW_HD void decode_group<DType::Q5_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 176;  // d, dmin, scales[12], qh[32], qs[128]
  const int e0 = 8 * static_cast<int>(g & 31), c = e0 >> 6, high = (e0 >> 5) & 1, l0 = e0 & 31;
  int sc, m;
  kq_scale_min_k4(b + 4, 2 * c + high, sc, m);
  const float d = half_bits_to_float(load_u16(b)) * small_int_to_float(sc);
  const float n = half_bits_to_float(load_u16(b + 2)) * small_int_to_float(m);
  uint8_t qh[8], q[8];
  load8(b + 16 + l0, qh);
  load8(b + 48 + 32 * c + l0, q);
  const int bit = 2 * c + high;
  for (int i = 0; i < 8; ++i) {
    const int lo = high ? q[i] >> 4 : q[i] & 0x0f;
    out[i] = d * small_int_to_float(lo | (((qh[i] >> bit) & 1) << 4)) - n;
  }
}
template <> MOEFLOW_HD void decode_group<DType::Q6_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 210;  // ql[128], qh[64], scales[16] (int8), d
  const int e0 = 8 * static_cast<int>(g & 31), h = e0 >> 7, k = (e0 & 127) >> 5, l0 = e0 & 31;
  const float d = half_bits_to_float(load_u16(b + 208)) * small_int_to_float(static_cast<int8_t>(b[192 + (e0 >> 4)]));
  uint8_t ql[8], qh[8];
  load8(b + 64 * h + 32 * (k & 1) + l0, ql);
  load8(b + 128 + 32 * h + l0, qh);
  for (int i = 0; i < 8; ++i) {
    const int lo = k < 2 ? ql[i] & 0x0f : ql[i] >> 4;
    out[i] = d * small_int_to_float((lo | (((qh[i] >> (2 * k)) & 3) << 4)) - 32);
  }
}

// IQ4_NL: q4_0's nibble order, each nibble a level of kIq4Levels.
template <> MOEFLOW_HD void decode_group<DType::IQ4_NL>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 2) * 18;
  const float d = half_bits_to_float(load_u16(b));
  const int part = static_cast<int>(g & 3);
  uint8_t q[8];
  load8(b + 2 + 8 * (part & 1), q);
  const int shift = part >= 2 ? 4 : 0;
  for (int i = 0; i < 8; ++i) out[i] = d * small_int_to_float(table_level(kIq4Lo, kIq4Hi, (q[i] >> shift) & 0x0f));
}
// IQ4_XS: super-block g / 32, its sub-block ib (32 elements) laid out as an IQ4_NL
// block's nibbles at qs[16 ib], with a 6-bit scale.
template <> MOEFLOW_HD void decode_group<DType::IQ4_XS>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 136;  // d, scales_h, scales_l[4], qs[128]
  const int e0 = 8 * static_cast<int>(g & 31), ib = e0 >> 5, part = (e0 & 31) >> 3;
  const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((load_u16(b + 2) >> (2 * ib)) & 3) << 4);
  const float dl = half_bits_to_float(load_u16(b)) * small_int_to_float(ls - 32);
  uint8_t q[8];
  load8(b + 8 + 16 * ib + 8 * (part & 1), q);
  const int shift = part >= 2 ? 4 : 0;
  for (int i = 0; i < 8; ++i) out[i] = dl * small_int_to_float(table_level(kIq4Lo, kIq4Hi, (q[i] >> shift) & 0x0f));
}
// MXFP4: IQ4_NL's nibble order under an E8M0 scale 2^(e - 128) (levels doubled), made
// from its bits: exact, subnormal for e < 2.
template <> MOEFLOW_HD void decode_group<DType::MXFP4>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 2) * 17;
  const uint32_t e = b[0];
  const float d = bits_to_float(e >= 2 ? (e - 1) << 23 : 0x00200000u << e);
  const int part = static_cast<int>(g & 3);
  uint8_t q[8];
  load8_bytes(b + 1 + 8 * (part & 1), q);
  const int shift = part >= 2 ? 4 : 0;
  for (int i = 0; i < 8; ++i) out[i] = d * small_int_to_float(table_level(kMxfp4Lo, kMxfp4Hi, (q[i] >> shift) & 0x0f));
}

// The types decode_group knows; the backend refuses the others by name.
inline bool cuda_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::IQ4_NL: case DType::IQ4_XS: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

}  // namespace moeflow::cuda
