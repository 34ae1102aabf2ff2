// ggml's 4-bit non-linear types, byte for byte as llama.cpp stores them: each 4-bit
// index selects one of 16 fixed levels (kIq4Levels) instead of an evenly spaced grid.
//   IQ4_NL (18 B per 32 weights):  f16 d, qs[16]; weight j (j < 16) in the low nibble of
//          qs[j], weight j + 16 in its high nibble.  x = d * kIq4Levels[nibble].
//   IQ4_XS (136 B per 256 weights): f16 d, u16 scales_h, scales_l[4], qs[128]; eight
//          sub-blocks of 32, sub-block ib laid out as an IQ4_NL block's nibbles in
//          qs[16 ib ..], its 6-bit scale ls = (nibble ib % 2 of scales_l[ib / 2]) |
//          (bits 2 ib..2 ib+1 of scales_h) << 4.  x = (d * (ls - 32)) * kIq4Levels[nibble].
//   MXFP4 (17 B per 32 weights, OCP microscaling FP4 as ggml stores it): uint8 e (an
//          E8M0 exponent), qs[16] with IQ4_NL's nibble order; each nibble an E2M1 value,
//          kept doubled in kMxfp4Levels, so x = 2^(e - 128) * kMxfp4Levels[nibble].
#pragma once
#include <cstdint>

namespace moeflow {

inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// E2M1 values times 2 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives).
inline constexpr int8_t kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct __attribute__((packed)) BlockMXFP4 { uint8_t e; uint8_t qs[16]; };
struct __attribute__((packed)) BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct __attribute__((packed)) BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17);

// 2^(e - 128), exact for every e (e < 2 gives f32 subnormals).
float mxfp4_scale(uint8_t e);

void dequantize_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb);
void dequantize_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb);
// Per block (IQ4_NL) or sub-block (IQ4_XS) a least-squares scale search over the level
// table; IQ4_XS's sub-block scales then quantised to 6 bits against the super-block's.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* b, int64_t nb);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* b, int64_t nb);
void dequantize_mxfp4(const BlockMXFP4* b, float* y, int64_t nb);
// Per block the exponent that fits the largest magnitude (or one lower, clipping it, when
// that rounds the block better), then every weight to the nearest level.
void quantize_mxfp4(const float* x, BlockMXFP4* b, int64_t nb);

}  // namespace moeflow
