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

// Elements a group holds, and bytes a block of block_elems elements takes.
template <DType T> struct GroupTraits;
template <> struct GroupTraits<DType::F32> { static constexpr int kGroup = 8, kBlock = 1, kBlockBytes = 4; };
template <> struct GroupTraits<DType::F16> { static constexpr int kGroup = 8, kBlock = 1, kBlockBytes = 2; };
template <> struct GroupTraits<DType::BF16> { static constexpr int kGroup = 8, kBlock = 1, kBlockBytes = 2; };
template <> struct GroupTraits<DType::Q8_0> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 34; };
template <> struct GroupTraits<DType::Q4_0> { static constexpr int kGroup = 8, kBlock = 32, kBlockBytes = 18; };
template <> struct GroupTraits<DType::Q2_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 84; };
template <> struct GroupTraits<DType::Q3_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 110; };
template <> struct GroupTraits<DType::Q4_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 144; };
template <> struct GroupTraits<DType::Q5_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 176; };
template <> struct GroupTraits<DType::Q6_K> { static constexpr int kGroup = 8, kBlock = 256, kBlockBytes = 210; };

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
  for (int i = 0; i < 8; ++i) out[i] = d * static_cast<float>(static_cast<int8_t>(q[i]));
}
template <> MOEFLOW_HD void decode_group<DType::Q4_0>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 2) * 18;
  const float d = half_bits_to_float(load_u16(b));
  const int part = static_cast<int>(g & 3);  // elements 8 part .. 8 part + 7: low nibbles, then high
  uint8_t q[8];
  load8(b + 2 + 8 * (part & 1), q);
  const int shift = part >= 2 ? 4 : 0;
  for (int i = 0; i < 8; ++i) out[i] = d * static_cast<float>(((q[i] >> shift) & 0x0f) - 8);
}

// k-quants: group g is elements e0 .. e0 + 7 of super-block g / 32, e0 = 8 * (g % 32);
// the eight share a sub-block and so one scale.
template <> MOEFLOW_HD void decode_group<DType::Q2_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 84;  // scales[16], qs[64], d, dmin
  const int e0 = 8 * static_cast<int>(g & 31), h = e0 >> 7, k = (e0 & 127) >> 5, l0 = e0 & 31;
  const int s = b[(e0 >> 4)];
  const float dl = half_bits_to_float(load_u16(b + 80)) * static_cast<float>(s & 0x0f);
  const float ml = half_bits_to_float(load_u16(b + 82)) * static_cast<float>(s >> 4);
  uint8_t qs[8];
  load8(b + 16 + 32 * h + l0, qs);
  for (int i = 0; i < 8; ++i) out[i] = dl * static_cast<float>((qs[i] >> (2 * k)) & 3) - ml;
}
template <> MOEFLOW_HD void decode_group<DType::Q3_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 110;  // hmask[32], qs[64], scales[12], d
  const int e0 = 8 * static_cast<int>(g & 31), h = e0 >> 7, k = (e0 & 127) >> 5, l0 = e0 & 31;
  const int j = e0 >> 4;
  const int scale = kq_scale_q3(b + 96, j);
  const float dl = half_bits_to_float(load_u16(b + 108)) * static_cast<float>(scale - 32);
  uint8_t qs[8], hm[8];
  load8(b + 32 + 32 * h + l0, qs);
  load8(b + l0, hm);
  for (int i = 0; i < 8; ++i) {
    const int q = ((qs[i] >> (2 * k)) & 3) | (((hm[i] >> (4 * h + k)) & 1) << 2);
    out[i] = dl * static_cast<float>(q - 4);
  }
}

template <> MOEFLOW_HD void decode_group<DType::Q4_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 144;  // d, dmin, scales[12], qs[128]
  const int e0 = 8 * static_cast<int>(g & 31), c = e0 >> 6, high = (e0 >> 5) & 1, l0 = e0 & 31;
  int sc, m;
  kq_scale_min_k4(b + 4, 2 * c + high, sc, m);
  const float d = half_bits_to_float(load_u16(b)) * static_cast<float>(sc);
  const float n = half_bits_to_float(load_u16(b + 2)) * static_cast<float>(m);
  uint8_t q[8];
  load8(b + 16 + 32 * c + l0, q);
  for (int i = 0; i < 8; ++i) out[i] = d * static_cast<float>(high ? q[i] >> 4 : q[i] & 0x0f) - n;
}
template <> MOEFLOW_HD void decode_group<DType::Q5_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 176;  // d, dmin, scales[12], qh[32], qs[128]
  const int e0 = 8 * static_cast<int>(g & 31), c = e0 >> 6, high = (e0 >> 5) & 1, l0 = e0 & 31;
  int sc, m;
  kq_scale_min_k4(b + 4, 2 * c + high, sc, m);
  const float d = half_bits_to_float(load_u16(b)) * static_cast<float>(sc);
  const float n = half_bits_to_float(load_u16(b + 2)) * static_cast<float>(m);
  uint8_t qh[8], q[8];
  load8(b + 16 + l0, qh);
  load8(b + 48 + 32 * c + l0, q);
  const int bit = 2 * c + high;
  for (int i = 0; i < 8; ++i) {
    const int lo = high ? q[i] >> 4 : q[i] & 0x0f;
    out[i] = d * static_cast<float>(lo | (((qh[i] >> bit) & 1) << 4)) - n;
  }
}
template <> MOEFLOW_HD void decode_group<DType::Q6_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* b = row + (g >> 5) * 210;  // ql[128], qh[64], scales[16] (int8), d
  const int e0 = 8 * static_cast<int>(g & 31), h = e0 >> 7, k = (e0 & 127) >> 5, l0 = e0 & 31;
  const float d = half_bits_to_float(load_u16(b + 208)) * static_cast<float>(static_cast<int8_t>(b[192 + (e0 >> 4)]));
  uint8_t ql[8], qh[8];
  load8(b + 64 * h + 32 * (k & 1) + l0, ql);
  load8(b + 128 + 32 * h + l0, qh);
  for (int i = 0; i < 8; ++i) {
    const int lo = k < 2 ? ql[i] & 0x0f : ql[i] >> 4;
    out[i] = d * static_cast<float>((lo | (((qh[i] >> (2 * k)) & 3) << 4)) - 32);
  }
}

// The types decode_group knows; the backend refuses the others by name.
inline bool cuda_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

}  // namespace moeflow::cuda
