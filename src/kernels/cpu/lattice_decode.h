// The lattice i-quants (tensor/iq_lattice.h) decoded a block of 32 weights at a time into
// what an integer kernel multiplies: 32 unsigned grid bytes in weight order, a mask of
// the weights whose sign is negative, and per half-block (16 weights) an odd integer
// factor under the super-block's float scale:
//   weight = scale · factor · (neg ? -1 : 1) · grid byte,
// with scale d / 8 (IQ2_XXS, IQ2_XS, IQ2_S, and IQ1), d / 4 (IQ3_XXS), d (IQ3_S). IQ1's
// grid bytes are its points -1, 0, 1 as int8 and `shift_neg` marks the weights whose
// shift is -1/8; the kernels make them (8 g ± 1), magnitudes 1, 7 or 9 and a sign, so
// that IQ1's scale is d / 8 too (int8_avx2.cpp). Plain C++, inlined into the kernel's
// instruction set.
#pragma once
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/iq_lattice.h"

namespace moeflow::cpu {

template <DType T>
constexpr int64_t kLatticeBytes = T == DType::IQ2_XXS ? 66 : T == DType::IQ2_XS ? 74 : T == DType::IQ2_S ? 82
                                  : T == DType::IQ3_XXS ? 98 : T == DType::IQ3_S ? 110 : T == DType::IQ1_S ? 50 : 56;

// The grids' rows (8 bytes each; IQ3's first 4 used), fetched once per kernel call.
struct LatticeTables {
  const uint8_t *iq2xxs, *iq2xs, *iq2s, *iq3xxs, *iq3s, *iq1s;
  LatticeTables()
      : iq2xxs(iq_grid_point(IqGrid::Iq2xxs, 0)), iq2xs(iq_grid_point(IqGrid::Iq2xs, 0)),
        iq2s(iq_grid_point(IqGrid::Iq2s, 0)), iq3xxs(iq_grid_point(IqGrid::Iq3xxs, 0)),
        iq3s(iq_grid_point(IqGrid::Iq3s, 0)), iq1s(iq_grid_point(IqGrid::Iq1s, 0)) {}
};

struct LatticeBlock {
  uint64_t g[4];         // grid bytes of weights 0-7, 8-15, 16-23, 24-31
  uint32_t neg = 0;      // IQ2 / IQ3: the weights that are negative
  uint32_t shift_neg = 0;  // IQ1: the weights whose shift is -1/8
  int fac[2];            // weights 0-15, 16-31
};

// The super-block's float scale (see above) of super-block sb.
template <DType T>
inline float lattice_scale(const uint8_t* sb) {
  uint16_t h;
  if constexpr (T == DType::IQ1_M) {
    uint16_t sc[4];
    std::memcpy(sc, sb + 48, 8);
    h = static_cast<uint16_t>((sc[0] >> 12) | (sc[1] >> 8 & 0x00f0) | (sc[2] >> 4 & 0x0f00) | (sc[3] & 0xf000));
  } else {
    std::memcpy(&h, sb, 2);
  }
  constexpr float k = T == DType::IQ3_XXS ? 0.25f : T == DType::IQ3_S ? 1.0f : 0.125f;
  return fp16_to_fp32(h) * k;
}

// Block blk (0..7) of super-block sb; without kGrid, g is left unset (IQ3's kernel
// gathers it).
template <DType T, bool kGrid = true>
inline LatticeBlock lattice_block(const LatticeTables& tb, const uint8_t* sb, int blk) {
  LatticeBlock o;
  auto grid8 = [](const uint8_t* table, int i) {
    uint64_t v;
    std::memcpy(&v, table + 8 * i, 8);
    return v;
  };
  auto grid4x2 = [](const uint8_t* table, int i, int j) {
    uint32_t a, b;
    std::memcpy(&a, table + 8 * i, 4);
    std::memcpy(&b, table + 8 * j, 4);
    return a | uint64_t{b} << 32;
  };
  const uint8_t* signs = kIqSignBytes.v;  // inline: a call per group cost the kernels most of their time
  if constexpr (T == DType::IQ2_XXS) {
    uint32_t a[2];
    std::memcpy(a, sb + 2 + 8 * blk, 8);
    for (int l = 0; l < 4; ++l) {
      o.g[l] = grid8(tb.iq2xxs, a[0] >> (8 * l) & 255);
      o.neg |= uint32_t{signs[a[1] >> (7 * l) & 127]} << (8 * l);
    }
    o.fac[0] = o.fac[1] = static_cast<int>(2 * (a[1] >> 28) + 1);
  } else if constexpr (T == DType::IQ2_XS || T == DType::IQ2_S) {
    const uint8_t sc = sb[kLatticeBytes<T> - 8 + blk];
    for (int l = 0; l < 4; ++l) {
      if constexpr (T == DType::IQ2_XS) {
        uint16_t q;
        std::memcpy(&q, sb + 2 + 2 * (4 * blk + l), 2);
        o.g[l] = grid8(tb.iq2xs, q & 511);
        o.neg |= uint32_t{signs[q >> 9]} << (8 * l);
      } else {
        o.g[l] = grid8(tb.iq2s, sb[2 + 4 * blk + l] | (sb[66 + blk] >> (2 * l) & 3) << 8);
      }
    }
    if constexpr (T == DType::IQ2_S) std::memcpy(&o.neg, sb + 2 + 32 + 4 * blk, 4);  // the groups' sign bytes in a row
    o.fac[0] = 2 * (sc & 15) + 1;
    o.fac[1] = 2 * (sc >> 4) + 1;
  } else if constexpr (T == DType::IQ3_XXS) {
    uint32_t a;
    std::memcpy(&a, sb + 2 + 64 + 4 * blk, 4);
    const uint8_t* qs = sb + 2 + 8 * blk;
    for (int l = 0; l < 4; ++l) {
      if constexpr (kGrid) o.g[l] = grid4x2(tb.iq3xxs, qs[2 * l], qs[2 * l + 1]);
      o.neg |= uint32_t{signs[a >> (7 * l) & 127]} << (8 * l);
    }
    o.fac[0] = o.fac[1] = static_cast<int>(2 * (a >> 28) + 1);
  } else if constexpr (T == DType::IQ3_S) {
    const uint8_t* qs = sb + 2 + 8 * blk;
    const uint8_t qh = sb[66 + blk];
    if constexpr (kGrid)
      for (int l = 0; l < 4; ++l)
        o.g[l] = grid4x2(tb.iq3s, qs[2 * l] | (qh >> (2 * l) & 1) << 8, qs[2 * l + 1] | (qh >> (2 * l + 1) & 1) << 8);
    std::memcpy(&o.neg, sb + 74 + 4 * blk, 4);  // the groups' sign bytes in a row
    o.fac[0] = o.fac[1] = 1 + 2 * (sb[106 + blk / 2] >> (4 * (blk % 2)) & 15);
  } else if constexpr (T == DType::IQ1_S) {
    uint16_t qh;
    std::memcpy(&qh, sb + 34 + 2 * blk, 2);
    for (int l = 0; l < 4; ++l) o.g[l] = grid8(tb.iq1s, sb[2 + 4 * blk + l] | (qh >> (3 * l) & 7) << 8);
    if (qh & 0x8000) o.shift_neg = 0xffffffffu;
    o.fac[0] = o.fac[1] = 2 * (qh >> 12 & 7) + 1;
  } else {
    static_assert(T == DType::IQ1_M);
    uint16_t sc;
    std::memcpy(&sc, sb + 48 + 2 * (blk / 2), 2);
    const uint8_t* qs = sb + 4 * blk;
    const uint8_t* qh = sb + 32 + 2 * blk;
    for (int l = 0; l < 4; ++l) {
      const int h = qh[l / 2] >> (4 * (l % 2));
      o.g[l] = grid8(tb.iq1s, qs[l] | (h & 7) << 8);
      if (h & 8) o.shift_neg |= 0xffu << (8 * l);
    }
    const int shift = 6 * (blk % 2);
    o.fac[0] = 2 * (sc >> shift & 7) + 1;
    o.fac[1] = 2 * (sc >> (shift + 3) & 7) + 1;
  }
  return o;
}

}  // namespace moeflow::cpu
