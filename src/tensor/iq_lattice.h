// ggml's lattice i-quants, byte for byte as llama.cpp stores them: super-blocks of 256
// weights whose groups of 8 (or 4) are points of a fixed grid, picked by index, with
// signs and scales beside. They are what the largest MoE downloads are made of
// (DeepSeek-R1 / V3, Kimi K2, Qwen3-235B at 1.6-3.3 bits a weight: IQ1_S, IQ1_M,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S). moeflow reads and multiplies them; it does not
// write them (llama-quantize needs an importance matrix to make them well).
//
// Per super-block (d an f16 unless said), weights in groups of 8:
//   IQ2_XXS (66 B):  d, u16 qs[32]. Block b of 32 weights = qs[4b..4b+3] read as two u32
//           a0, a1: byte l of a0 indexes kIq2xxs for group l; 7 bits l of a1 index
//           kSigns for its signs; a1 >> 28 = s. x = d (0.5 + s) / 4 * grid * sign.
//   IQ2_XS (74 B):   d, u16 qs[32], scales[8]. Group l of block b: q = qs[4b + l], grid
//           kIq2xs[q & 511], signs kSigns[q >> 9], scale nibble l / 2 of scales[b].
//   IQ2_S (82 B):    d, qs[64], qh[8], scales[8]. qs[0..31]: grid low bytes, 4 a block;
//           qs[32..63]: the groups' sign bytes; index = qs | bits 2l..2l+1 of qh[b] << 8
//           into kIq2s; scales as IQ2_XS.
//   IQ3_XXS (98 B):  d, qs[96]. qs[0..63]: indexes into kIq3xxs (4 weights each), two
//           a group; qs[64 + 4b ..] a u32 per block: sign indexes and s (>> 28),
//           x = d (0.5 + s) / 2 * grid * sign.
//   IQ3_S (110 B):   d, qs[64], qh[8], signs[32], scales[4]. Index = qs | one bit of qh
//           << 8 into kIq3s (4 weights); signs bit per weight; block scale d (1 + 2 nibble).
//   IQ1_S (50 B):    d, qs[32], u16 qh[8]. Group l of block b: index qs[4b + l] | bits
//           3l..3l+2 of qh[b] << 8 into kIq1s (values -1, 0, 1); block scale
//           d (2 ((qh >> 12) & 7) + 1); x = scale (grid ± 1/8, minus where qh's top bit).
//   IQ1_M (56 B):    qs[32], qh[16], scales[8] (no d of its own: its f16 is the top
//           nibbles of the four u16 of scales); per block two 3-bit scales, per group a
//           3-bit high index and a delta sign in qh.
// kSigns[i] is i with an eighth bit that makes the count of set bits even.
#pragma once
#include <cstdint>

namespace moeflow {

struct __attribute__((packed)) BlockIQ2_XXS { uint16_t d; uint16_t qs[32]; };
struct __attribute__((packed)) BlockIQ2_XS { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
struct __attribute__((packed)) BlockIQ2_S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; };
struct __attribute__((packed)) BlockIQ3_XXS { uint16_t d; uint8_t qs[96]; };
struct __attribute__((packed)) BlockIQ3_S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
struct __attribute__((packed)) BlockIQ1_S { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; };
struct __attribute__((packed)) BlockIQ1_M { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; };
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 &&
              sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 &&
              sizeof(BlockIQ1_M) == 56);

// The grids, one row of bytes per point: 8 for the IQ2 and IQ1 grids (IQ1's signed),
// 4 for the IQ3 ones (tensor/iq_grid_codes.cpp holds them as 2- or 3-bit codes).
enum class IqGrid { Iq2xxs, Iq2xs, Iq2s, Iq3xxs, Iq3s, Iq1s };
int iq_grid_points(IqGrid g);
int iq_grid_width(IqGrid g);
const uint8_t* iq_grid_point(IqGrid g, int i);
// kSigns: i (< 128) with an eighth bit that makes the count of set bits even.
struct IqSignBytes {
  uint8_t v[128];
  constexpr IqSignBytes() : v() {
    for (int i = 0; i < 128; ++i) {
      int bits = 0;
      for (int j = 0; j < 7; ++j) bits += i >> j & 1;
      v[i] = static_cast<uint8_t>(i | (bits & 1) << 7);
    }
  }
};
inline constexpr IqSignBytes kIqSignBytes;
inline uint8_t iq_sign_byte(int i) { return kIqSignBytes.v[i]; }

// nb super-blocks of type t (one of the seven) from pseudo-random bytes of `seed`,
// every super-block's scale set to 2^scale_exp (IQ1_M's spread over its scale words):
// valid blocks for the tests and bench-kernels, which cannot quantise to these types.
void random_lattice_blocks(int t_ggml_id, int nb, uint32_t seed, int scale_exp, uint8_t* out);

void dequantize_iq2_xxs(const BlockIQ2_XXS* b, float* y, int64_t nb);
void dequantize_iq2_xs(const BlockIQ2_XS* b, float* y, int64_t nb);
void dequantize_iq2_s(const BlockIQ2_S* b, float* y, int64_t nb);
void dequantize_iq3_xxs(const BlockIQ3_XXS* b, float* y, int64_t nb);
void dequantize_iq3_s(const BlockIQ3_S* b, float* y, int64_t nb);
void dequantize_iq1_s(const BlockIQ1_S* b, float* y, int64_t nb);
void dequantize_iq1_m(const BlockIQ1_M* b, float* y, int64_t nb);

}  // namespace moeflow
