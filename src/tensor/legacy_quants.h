// ggml's other 32-weight linear types, byte for byte as llama.cpp stores them. Files
// carry them as whole types (TheBloke's Q4_1 / Q5_0 / Q5_1 downloads) and, far more
// often, inside k-quant mixes: llama-quantize writes a matrix whose rows are not whole
// 256-column super-blocks in q5_0 where the mix asked for Q4_K and in q5_1 where it asked
// for Q5_K (Qwen1.5-MoE's and DeepSeek-V2-Lite's 1408-wide expert down projections,
// gpt-oss's 2880-wide attention), so a Q4_K_M file of those models has them.
//   Q4_1 (20 B per 32 weights): f16 d, f16 m, qs[16]; nibble n of weight j as q4_0's
//          (j < 16 the low nibble of qs[j], j + 16 its high nibble).  x = d * n + m.
//   Q5_0 (22 B): f16 d, qh[4], qs[16]; the 5-bit q = nibble | (bit j of qh, read as a
//          little-endian 32-bit word) << 4.  x = d * (q - 16).
//   Q5_1 (24 B): f16 d, f16 m, qh[4], qs[16]; q as Q5_0's.  x = d * q + m.
#pragma once
#include <cstdint>

namespace moeflow {

struct __attribute__((packed)) BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct __attribute__((packed)) BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct __attribute__((packed)) BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);

// Weight j's unsigned quant (0..15 for Q4_1, 0..31 for the 5-bit types).
inline int legacy_nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }
inline int legacy_high_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

void dequantize_q4_1(const BlockQ4_1* b, float* y, int64_t nb);
void dequantize_q5_0(const BlockQ5_0* b, float* y, int64_t nb);
void dequantize_q5_1(const BlockQ5_1* b, float* y, int64_t nb);
// As ggml's reference quantisers: Q5_0 symmetric about the block's value of largest
// magnitude (d = max / -16), Q4_1 / Q5_1 from the block's minimum to its maximum
// (d = (max - min) / 15 or 31, m = min), every weight rounded to the nearest step.
void quantize_q4_1(const float* x, BlockQ4_1* b, int64_t nb);
void quantize_q5_0(const float* x, BlockQ5_0* b, int64_t nb);
void quantize_q5_1(const float* x, BlockQ5_1* b, int64_t nb);

}  // namespace moeflow
