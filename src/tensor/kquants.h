// The k-quant block formats of ggml/GGUF ("k-quants": Q2_K .. Q6_K), byte for byte as
// llama.cpp stores them. A block is a super-block of 256 weights split into sub-blocks
// (16 of 16 weights, or 8 of 32) whose scales are themselves quantised against one or
// two f16 super-block scales. Dequantisation (x = weight):
//   Q2_K (84 B):  scales[16] (low nibble: scale, high nibble: min, per 16 weights),
//                 qs[64] (2-bit quants), f16 d, f16 dmin.
//                 x = (d * sc) * q - (dmin * m),  q in 0..3.
//   Q3_K (110 B): hmask[32] (bit 3 of each quant), qs[64] (bits 0-1), scales[12]
//                 (16 6-bit scales, stored + 32), f16 d.
//                 x = (d * (s - 32)) * (q - 4),  q in 0..7.
//   Q4_K (144 B): f16 d, f16 dmin, scales[12] (8 6-bit scales and 8 6-bit mins, one
//                 pair per 32 weights), qs[128] (4-bit quants).
//                 x = (d * sc) * q - (dmin * m),  q in 0..15.
//   Q5_K (176 B): as Q4_K plus qh[32] (bit 4 of each quant).   q in 0..31.
//   Q6_K (210 B): ql[128] (bits 0-3), qh[64] (bits 4-5), int8 scales[16] (per 16
//                 weights), f16 d.
//                 x = (d * sc) * (q - 32),  q in 0..63.
#pragma once
#include "base/host_device.h"
#include <cstdint>

namespace moeflow {

constexpr int64_t kQK_K = 256;  // weights per k-quant super-block

struct __attribute__((packed)) BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct __attribute__((packed)) BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct __attribute__((packed)) BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct __attribute__((packed)) BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct __attribute__((packed)) BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7, weights 32j..32j+31).
// Sub-blocks 0-3 keep theirs in the low 6 bits of scales[j] / scales[j+4]; sub-blocks
// 4-7 keep their low 4 bits in the nibbles of scales[j+4] and their top 2 bits in the
// top bits of scales[j-4] / scales[j].
MOEFLOW_HD void kq_scale_min_k4(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// Q3_K: the 6-bit scale (0..63, to be used minus 32) of sub-block j (0..15): low 4 bits
// in a nibble of scales[j % 8] (low for j < 8), top 2 bits in scales[8 + j % 4] at bit
// 2 * (j / 4).
MOEFLOW_HD int kq_scale_q3(const uint8_t* s, int j) {
  const int lo = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
  return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// Where weight i (0..255) of a block keeps its quant bits (h = i / 128, k = (i % 128) / 32,
// l = i % 32, c = i / 64):
//   Q2_K: qs[32h + l] bits 2k..2k+1.
//   Q3_K: bits 0-1 as Q2_K's; bit 2 in hmask[l] at bit 4h + k.
//   Q4_K: qs[32c + l], low nibble for i % 64 < 32, high nibble otherwise.
//   Q5_K: bits 0-3 as Q4_K's; bit 4 in qh[l] at bit i / 32.
//   Q6_K: bits 0-3 in ql[64h + 32(k % 2) + l] (low nibble for k < 2, high otherwise);
//         bits 4-5 in qh[32h + l] at bit 2k.
// Sub-block scales: Q2_K, Q3_K, Q6_K one per 16 weights (index i / 16); Q4_K, Q5_K one
// scale and min per 32 (index i / 32).

// Dequantise / quantise nb whole blocks (256 weights each).
void dequantize_q2_k(const BlockQ2_K* b, float* y, int64_t nb);
void dequantize_q3_k(const BlockQ3_K* b, float* y, int64_t nb);
void dequantize_q4_k(const BlockQ4_K* b, float* y, int64_t nb);
void dequantize_q5_k(const BlockQ5_K* b, float* y, int64_t nb);
void dequantize_q6_k(const BlockQ6_K* b, float* y, int64_t nb);
// Quantisers: per sub-block a least-squares scale (and min) search over candidate
// grids (kquants.cpp), then the sub-block scales quantised against the super-block
// scale, then every weight rounded against the scale it will be decoded with.
void quantize_q2_k(const float* x, BlockQ2_K* b, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* b, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* b, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* b, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* b, int64_t nb);

}  // namespace moeflow
