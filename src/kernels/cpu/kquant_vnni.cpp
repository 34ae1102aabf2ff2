// k-quant mat-vec rows with AVX-512 VNNI; see kquant_vnni.h for the arithmetic and
// vnni_target.h for how the file builds.
#include "kernels/cpu/vnni_target.h"  // first: its pragmas must precede immintrin.h
#include "kernels/cpu/kquant_vnni.h"

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kernels/cpu/kquant_matvec.h"
#include "kernels/cpu/kquant_scales.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/row_token_tiles.h"
#include "kernels/cpu/quantize_x8.h"
#include "tensor/kquants.h"

namespace moeflow::cpu {
namespace {

// One super-block's packed activation (lanes as kquant_vnni.h describes).
struct alignas(64) PackedKq {
  int8_t hi[256];      // qx >> 8, columns in order
  uint8_t lo[256];     // qx & 255
  int32_t q6_off[16];  // lane 4k+v: -32 * sum of qx over 16-column sub-block 4v+k
  float q6_dx[16];     // lane 4k+v: dx of sub-block 4v+k's 32 columns
  float q4_dx[16];     // lane 4k+v: dx of 32-column sub-block q4_lane_block(4k+v)
  float q4_xsum[16];   // lane 4k+v: half the activation's sum over that sub-block
};
static_assert(sizeof(PackedKq) == kKquantXBlockBytes);

// Q4_K's reduced lanes: vectors v = 0..3 are the low nibbles of qs[0..63], their high
// nibbles, the low and high nibbles of qs[64..127]; a 64-byte load of nibbles holds
// 32-column sub-blocks 4u (bytes 0-31, low), 4u+2 (bytes 32-63, low), 4u+1 and 4u+3
// (high), u = v / 2. Lane 4k+v covers 128-bit lane k of vector v.
constexpr int q4_lane_block(int lane) {
  const int k = lane / 4, v = lane % 4;
  return 4 * (v / 2) + v % 2 + 2 * (k / 2);
}

}  // namespace

namespace {
// A block's sums and scales from the sums of its sixteen 16-column runs of quantised
// activation values (int16 or int8) and its eight per-32-column scales dx.
void fill_sums(PackedKq& k, const int32_t* sum16, const float* dx) {
  for (int lane = 0; lane < 16; ++lane) {
    const int k4 = lane / 4, v = lane % 4;
    const int s16 = 4 * v + k4, s32 = q4_lane_block(lane);
    k.q6_off[lane] = -32 * sum16[s16];
    k.q6_dx[lane] = dx[s16 / 2];
    k.q4_dx[lane] = dx[s32];
    k.q4_xsum[lane] = 0.5f * dx[s32] * static_cast<float>(sum16[2 * s32] + sum16[2 * s32 + 1]);
  }
}

void sums_of_16(const int32_t* q, int32_t* sum16) {
  for (int s = 0; s < 16; ++s) {
    sum16[s] = 0;
    for (int i = 0; i < 16; ++i) sum16[s] += q[16 * s + i];
  }
}
}  // namespace

void kquant_vnni_pack_x_reference(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  auto* p = reinterpret_cast<PackedKq*>(out);
  int32_t q[256], sum16[16];
  for (int64_t b = 0; b < cols / 256; ++b, qx += 256, dx += 8) {
    PackedKq& k = p[b];
    for (int i = 0; i < 256; ++i) {
      k.hi[i] = static_cast<int8_t>(qx[i] >> 8);
      k.lo[i] = static_cast<uint8_t>(qx[i] & 255);
      q[i] = qx[i];
    }
    sums_of_16(q, sum16);
    fill_sums(k, sum16, dx);
  }
}

void kquant_vnni_pack_x8_reference(const float* x, int64_t cols, uint8_t* out) {
  auto* p = reinterpret_cast<PackedKq*>(out);
  int32_t q[256], sum16[16];
  float dx[8];
  for (int64_t b = 0; b < cols / 256; ++b, x += 256) {
    PackedKq& k = p[b];
    for (int s = 0; s < 8; ++s) {
      int8_t q8[32];
      dx[s] = quantize_x8_block(x + 32 * s, q8);
      for (int i = 0; i < 32; ++i) {
        k.hi[32 * s + i] = q8[i];
        k.lo[32 * s + i] = 0;
        q[32 * s + i] = q8[i];
      }
    }
    sums_of_16(q, sum16);
    fill_sums(k, sum16, dx);
  }
}

#ifdef MOEFLOW_HAVE_VNNI_KERNEL

#define KQ_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,f16c,fma")))

namespace {

// The packings with AVX-512: the same bytes as the references (scalar: ~4 us for a
// 2048-column activation, on the calling thread between parallel sections, which a
// batched step of 16 sequences paid ~40 times a layer).
KQ_ATTR void pack_x_avx512(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  auto* p = reinterpret_cast<PackedKq*>(out);
  const __m512i ones = _mm512_set1_epi16(1);
  int32_t sum16[16];
  for (int64_t b = 0; b < cols / 256; ++b, qx += 256, dx += 8) {
    PackedKq& k = p[b];
    for (int s = 0; s < 8; ++s) {  // 32 columns
      const __m512i v = _mm512_loadu_si512(qx + 32 * s);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(k.hi + 32 * s), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(k.lo + 32 * s), _mm512_cvtepi16_epi8(v));  // low bytes
      const __m512i pairs = _mm512_madd_epi16(v, ones);  // 16 sums of two columns
      sum16[2 * s] = _mm512_reduce_add_epi32(_mm512_maskz_mov_epi32(0x00ff, pairs));
      sum16[2 * s + 1] = _mm512_reduce_add_epi32(_mm512_maskz_mov_epi32(0xff00, pairs));
    }
    fill_sums(k, sum16, dx);
  }
}

KQ_ATTR void pack_x8_avx512(const float* x, int64_t cols, uint8_t* out) {
  auto* p = reinterpret_cast<PackedKq*>(out);
  int32_t sum16[16];
  float dx[8];
  for (int64_t b = 0; b < cols / 256; ++b, x += 256) {
    PackedKq& k = p[b];
    for (int s = 0; s < 8; ++s) {  // 32 columns
      const X8BlockAvx512 q = quantize_x8_block_avx512(x + 32 * s);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(k.hi + 32 * s), _mm512_cvtsepi32_epi8(q.q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(k.hi + 32 * s + 16), _mm512_cvtsepi32_epi8(q.q1));
      sum16[2 * s] = _mm512_reduce_add_epi32(q.q0);
      sum16[2 * s + 1] = _mm512_reduce_add_epi32(q.q1);
      dx[s] = q.d;
    }
    std::memset(k.lo, 0, sizeof k.lo);
    fill_sums(k, sum16, dx);
  }
}

// Lane 4k+v of the result: the sum of s_v's 128-bit lane k.
KQ_ATTR inline __m512i reduce_quads(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
  const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
  const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
}

// sum over 64 columns of w * x per 4-column lane, exactly: x = 256*hi + lo (int16
// activations), or x = hi alone (X8: int8 activations, kquant_vnni_pack_x8).
template <bool X8>
KQ_ATTR inline __m512i dot64(__m512i w, __m512i xhi, __m512i xlo) {
  const __m512i h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xhi);
  if constexpr (X8) return h;
  return _mm512_add_epi32(_mm512_slli_epi32(h, 8), _mm512_dpbusd_epi32(_mm512_setzero_si512(), xlo, w));
}

KQ_ATTR inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Byte indices turning 8 / 16 per-sub-block bytes into the reduced lanes' order.
struct LaneIndex {
  alignas(16) uint8_t q4_scale[16], q4_min[16], q6[16];
  constexpr LaneIndex() : q4_scale{}, q4_min{}, q6{} {
    for (int lane = 0; lane < 16; ++lane) {
      const int k = lane / 4, v = lane % 4;
      q4_scale[lane] = static_cast<uint8_t>(q4_lane_block(lane));
      q4_min[lane] = static_cast<uint8_t>(8 + q4_lane_block(lane));
      q6[lane] = static_cast<uint8_t>(4 * v + k);
    }
  }
};
constexpr LaneIndex kLanes;

// Q5_K's fifth bit of 64-byte vector v (as Q4_K's vectors: sub-blocks 4u, 4u+2 in the
// low nibbles, 4u+1, 4u+3 in the high ones, u = v / 2): qh[l] holds sub-block j's bit
// at bit j, so bytes 0-31 of vector v test bit j0 of qh[0..31] and bytes 32-63 bit j0+2.
struct Q5BitMasks {
  alignas(64) uint8_t m[4][64];
  constexpr Q5BitMasks() : m{} {
    for (int v = 0; v < 4; ++v) {
      const int j0 = 4 * (v / 2) + v % 2;
      for (int i = 0; i < 64; ++i) m[v][i] = static_cast<uint8_t>(1u << (i < 32 ? j0 : j0 + 2));
    }
  }
};
constexpr Q5BitMasks kQ5Bits;

// A Q4_K (Q5_K) super-block of one row, as every kernel here multiplies it: its four
// 64-byte quant vectors (kquant_vnni.h's order) and its sub-block scales times d and
// mins times dmin in the reduced lanes' order.
struct Q45Unpacker {
  __m512i nibble, k16;
  __m128i sc_idx, m_idx, low_idx, high_idx;
};
KQ_ATTR inline Q45Unpacker q45_unpacker() {
  return {_mm512_set1_epi8(0x0f),
          _mm512_set1_epi8(16),
          _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q4_scale)),
          _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q4_min)),
          _mm_load_si128(reinterpret_cast<const __m128i*>(kQ4Scales.low)),
          _mm_load_si128(reinterpret_cast<const __m128i*>(kQ4Scales.high))};
}
template <bool Q5, class Block>
KQ_ATTR inline void q45_unpack(const Q45Unpacker& k, const Block& blk, __m512i* w, __m512& scd, __m512& mnd) {
  for (int u = 0; u < 2; ++u) {
    const __m512i q = _mm512_loadu_si512(blk.qs + 64 * u);
    w[2 * u] = _mm512_and_si512(q, k.nibble);
    w[2 * u + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), k.nibble);
    if constexpr (Q5) {
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh)));
      for (int j = 0; j < 2; ++j) {
        const __mmask64 bit = _mm512_test_epi8_mask(qh, _mm512_load_si512(kQ5Bits.m[2 * u + j]));
        w[2 * u + j] = _mm512_mask_add_epi8(w[2 * u + j], bit, w[2 * u + j], k.k16);
      }
    }
  }
  const __m128i sm = q4_k_scales_mins(blk.scales, k.low_idx, k.high_idx);
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sm, k.sc_idx)));
  const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sm, k.m_idx)));
  scd = _mm512_mul_ps(sc, _mm512_set1_ps(half_to_float(blk.d)));
  mnd = _mm512_mul_ps(mn, _mm512_set1_ps(half_to_float(blk.dmin)));
}

// The activation's high (and, for int16 activations, low) byte planes of a super-block
// in the Q4_K nibbles' order: columns 0-31 with 64-95 and 32-63 with 96-127 of each 128.
template <bool X8>
KQ_ATTR inline void q45_activation(const PackedKq& xb, __m512i* xh, __m512i* xl) {
  for (int u = 0; u < 2; ++u) {
    const __m512i h0 = _mm512_load_si512(xb.hi + 128 * u), h1 = _mm512_load_si512(xb.hi + 128 * u + 64);
    xh[2 * u] = _mm512_shuffle_i64x2(h0, h1, 0x44);
    xh[2 * u + 1] = _mm512_shuffle_i64x2(h0, h1, 0xee);
    if constexpr (!X8) {
      const __m512i l0 = _mm512_load_si512(xb.lo + 128 * u), l1 = _mm512_load_si512(xb.lo + 128 * u + 64);
      xl[2 * u] = _mm512_shuffle_i64x2(l0, l1, 0x44);
      xl[2 * u + 1] = _mm512_shuffle_i64x2(l0, l1, 0xee);
    }
  }
}

// Q4_K rows, and Q5_K's (Q5: the same scales and nibbles, plus the fifth bits in qh).
template <int R, bool Q5, bool X8>
KQ_ATTR void rows_q45_k(const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;
  const Q45Unpacker k = q45_unpacker();
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (pf) prefetch_nta(pf + b * R * static_cast<int64_t>(sizeof(Block)), R * sizeof(Block));
    const PackedKq& xb = x[b];
    __m512i xh[4], xl[4];  // once for the R rows
    q45_activation<X8>(xb, xh, xl);
    const __m512 dx = _mm512_load_ps(xb.q4_dx), xsum = _mm512_load_ps(xb.q4_xsum);
    for (int r = 0; r < R; ++r) {
      __m512i w[4];
      __m512 scd, mnd;
      q45_unpack<Q5>(k, reinterpret_cast<const Block*>(rows[r])[b], w, scd, mnd);
      __m512i s[4];
      for (int v = 0; v < 4; ++v) s[v] = dot64<X8>(w[v], xh[v], X8 ? xh[v] : xl[v]);  // int8: no low plane
      const __m512i t = reduce_quads(s[0], s[1], s[2], s[3]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(scd, dx), acc[r]);
      acc[r] = _mm512_fnmadd_ps(mnd, xsum, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// A Q6_K super-block of one row, as every kernel here multiplies it: its four 64-byte
// vectors of 6-bit quants (kquant_vnni.h's order) and its sub-block scales times d.
struct Q6Unpacker {
  __m512i nibble, hi2_lo2;
  __m128i sc_idx;
};
KQ_ATTR inline Q6Unpacker q6_unpacker() {
  return {_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x33),
          _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q6))};
}
KQ_ATTR inline void q6_unpack(const Q6Unpacker& k, const BlockQ6_K& blk, __m512i* w, __m512& scd) {
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
    // Second half pre-shifted by 2: columns 32-63 (and 96-127) take bits 2-3 (6-7).
    // Bits 0-1 and 4-5 of each byte: the high bits of vector wa (shifted up by 4) and wb.
    const __m512i qhb =
        _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1), k.hi2_lo2);
    // Bits 0-3 from the nibble, 4-7 from the high bits (ternary logic 0xe4: c ? a : b).
    w[2 * h] = _mm512_ternarylogic_epi32(ql, _mm512_slli_epi16(qhb, 4), k.nibble, 0xe4);
    w[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), qhb, k.nibble, 0xe4);
  }
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc8, k.sc_idx)));
  scd = _mm512_mul_ps(sc, _mm512_set1_ps(half_to_float(blk.d)));
}

template <int R, bool X8>
KQ_ATTR void rows_q6_k(const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  const Q6Unpacker k = q6_unpacker();
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (pf) prefetch_nta(pf + b * R * static_cast<int64_t>(sizeof(BlockQ6_K)), R * sizeof(BlockQ6_K));
    const PackedKq& xb = x[b];
    __m512i xh[4], xl[4];
    for (int v = 0; v < 4; ++v) {
      xh[v] = _mm512_load_si512(xb.hi + 64 * v);
      xl[v] = _mm512_load_si512(xb.lo + 64 * v);
    }
    const __m512i off = _mm512_load_si512(xb.q6_off);
    const __m512 dx = _mm512_load_ps(xb.q6_dx);
    for (int r = 0; r < R; ++r) {
      __m512i w[4];
      __m512 scd;
      q6_unpack(k, reinterpret_cast<const BlockQ6_K*>(rows[r])[b], w, scd);
      __m512i s[4];
      for (int v = 0; v < 4; ++v) s[v] = dot64<X8>(w[v], xh[v], xl[v]);
      const __m512i t = _mm512_add_epi32(reduce_quads(s[0], s[1], s[2], s[3]), off);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(scd, dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// Dequantisation in AVX-512, bit-identical to dequantize_row: the same products in the
// same order, and no contraction of a multiply and a subtract into one rounding.
__attribute__((optimize("fp-contract=off"))) KQ_ATTR void dequant_q4_k(const BlockQ4_K* b, int64_t nb, float* y) {
  const __m128i low_idx = _mm_load_si128(reinterpret_cast<const __m128i*>(kQ4Scales.low));
  const __m128i high_idx = _mm_load_si128(reinterpret_cast<const __m128i*>(kQ4Scales.high));
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    const __m128i sm = q4_k_scales_mins(b[i].scales, low_idx, high_idx);
    const __m512 dd = _mm512_insertf32x8(_mm512_set1_ps(half_to_float(b[i].d)),
                                         _mm256_set1_ps(half_to_float(b[i].dmin)), 1);
    alignas(64) float f[16];  // d * scale (0-7), dmin * min (8-15)
    _mm512_store_ps(f, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm)), dd));
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0f));
      for (int half = 0; half < 2; ++half) {
        const __m256i n = half == 0 ? lo : hi;
        const int j = 2 * c + half;
        const __m512 d = _mm512_set1_ps(f[j]), m = _mm512_set1_ps(f[8 + j]);
        for (int k = 0; k < 2; ++k) {
          const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k == 0 ? _mm256_castsi256_si128(n)
                                                                           : _mm256_extracti128_si256(n, 1)));
          _mm512_storeu_ps(y + 64 * c + 32 * half + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d, qf), m));
        }
      }
    }
  }
}

__attribute__((optimize("fp-contract=off"))) KQ_ATTR void dequant_q6_k(const BlockQ6_K* b, int64_t nb, float* y) {
  const __m512i nibble = _mm512_set1_epi8(0x0f), hi2 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    alignas(64) float f[16];  // d * scale of each 16-weight sub-block
    _mm512_store_ps(f, _mm512_mul_ps(_mm512_set1_ps(half_to_float(b[i].d)),
                                     _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales))))));
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b[i].ql + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i w[2] = {
          _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(ql, nibble), _mm512_and_si512(_mm512_slli_epi16(qh2, 4), hi2)), k32),
          _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble), _mm512_and_si512(qh2, hi2)), k32)};
      for (int v = 0; v < 2; ++v) {
        alignas(64) int8_t q[64];
        _mm512_store_si512(q, w[v]);
        for (int k = 0; k < 4; ++k) {  // 16 weights: sub-block 8h + 4v + k
          const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * k))));
          _mm512_storeu_ps(y + 128 * h + 64 * v + 16 * k, _mm512_mul_ps(_mm512_set1_ps(f[8 * h + 4 * v + k]), qf));
        }
      }
    }
  }
}

// Q3_K's and Q2_K's quant bits for vector v (columns 64v..64v+63; half h = v / 2, j = v
// % 2): 2-bit fields 2k of qs[32h + l] for quarters k = 2j (bytes 0-31) and 2j+1 (32-63);
// Q3_K's third bit at bit 4h + k of hmask[l].
struct Q3HighBits {
  alignas(64) uint8_t m[4][64];
  constexpr Q3HighBits() : m{} {
    for (int v = 0; v < 4; ++v)
      for (int i = 0; i < 64; ++i) m[v][i] = static_cast<uint8_t>(1u << (4 * (v / 2) + 2 * (v % 2) + (i < 32 ? 0 : 1)));
  }
};
constexpr Q3HighBits kQ3High;
// Q3_K's 16 6-bit scales (kq_scale_q3) from the 16 bytes at block offset 94 (the scales
// sit at 96-107: indices 2-13): low 4 bits from byte 2 + j % 8 (high nibble for j >= 8),
// top 2 bits from byte 10 + j % 4 at bit 2 * (j / 4).
struct Q3ScaleIndex {
  alignas(16) uint8_t low[16], high[16];
  alignas(16) uint16_t shift[8];
  constexpr Q3ScaleIndex() : low{}, high{}, shift{} {
    for (int j = 0; j < 16; ++j) {
      low[j] = static_cast<uint8_t>(2 + j % 8);
      high[j] = static_cast<uint8_t>(10 + j % 4);
    }
    for (int w = 0; w < 8; ++w) shift[w] = static_cast<uint16_t>(2 * (w / 2));  // word w: j = 2w, 2w+1
  }
};
constexpr Q3ScaleIndex kQ3Scales;

// One Q3_K (Q3) or Q2_K super-block of a row unpacked: w[v] the quants of columns
// 64v..64v+63 (Q3_K: q in 0..7, its offset of 4 taken off later as -4 * sum(x) per
// sub-block; Q2_K: q in 0..3), and per lane (16-column sub-blocks in Q6_K's lane order,
// lane 4k+v is sub-block 4v+k) scd = d * scale (Q3_K's signed 6-bit scales, Q2_K's 4-bit
// ones) and, Q2_K only, mnd = dmin * min (its mins multiply the activation's sum).
template <bool Q3>
KQ_ATTR inline void q23_unpack(const std::conditional_t<Q3, BlockQ3_K, BlockQ2_K>& blk, __m128i lane_idx, __m512i* w,
                               __m512& scd, __m512& mnd) {
  const __m512i k03 = _mm512_set1_epi8(0x03), k4 = _mm512_set1_epi8(4);
  __m512i hm;
  if constexpr (Q3) hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask)));
  for (int h = 0; h < 2; ++h) {
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * h));
    const __m512i qs2 = _mm512_inserti64x4(_mm512_castsi256_si512(qs), _mm256_srli_epi16(qs, 2), 1);
    for (int j = 0; j < 2; ++j) {
      const int v = 2 * h + j;
      w[v] = _mm512_and_si512(j == 0 ? qs2 : _mm512_srli_epi16(qs2, 4), k03);
      if constexpr (Q3) w[v] = _mm512_mask_add_epi8(w[v], _mm512_test_epi8_mask(hm, _mm512_load_si512(kQ3High.m[v])), w[v], k4);
    }
  }
  if constexpr (Q3) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(&blk) + 94));
    const __m128i a = _mm_shuffle_epi8(raw, _mm_load_si128(reinterpret_cast<const __m128i*>(kQ3Scales.low)));
    const __m128i low = _mm_and_si128(_mm_mask_blend_epi8(0xff00, a, _mm_srli_epi16(a, 4)), _mm_set1_epi8(0x0f));
    const __m128i hb = _mm_shuffle_epi8(raw, _mm_load_si128(reinterpret_cast<const __m128i*>(kQ3Scales.high)));
    const __m128i high = _mm_and_si128(
        _mm_srlv_epi16(hb, _mm_load_si128(reinterpret_cast<const __m128i*>(kQ3Scales.shift))), _mm_set1_epi8(0x03));
    const __m128i sc6 = _mm_or_si128(low, _mm_slli_epi16(high, 4));
    const __m512 sc = _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sc6, lane_idx)), _mm512_set1_epi32(32)));
    scd = _mm512_mul_ps(sc, _mm512_set1_ps(half_to_float(blk.d)));
    mnd = _mm512_setzero_ps();
  } else {
    const __m128i sm = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)), lane_idx);
    const __m512i smw = _mm512_cvtepu8_epi32(sm);
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_and_si512(smw, _mm512_set1_epi32(0x0f)));
    const __m512 mn = _mm512_cvtepi32_ps(_mm512_srli_epi32(smw, 4));
    scd = _mm512_mul_ps(sc, _mm512_set1_ps(half_to_float(blk.d)));
    mnd = _mm512_mul_ps(mn, _mm512_set1_ps(half_to_float(blk.dmin)));
  }
}

// One token's share of a Q3_K / Q2_K super-block: w, scd, mnd as q23_unpack gives them,
// the token's activation planes xh / xl and (Q2_K) its sum per sub-block xsum
// (q23_xsum), into acc.
template <bool Q3, bool X8>
KQ_ATTR inline __m512 q23_step(const __m512i* w, __m512 scd, __m512 mnd, const __m512i* xh, const __m512i* xl,
                               __m512 xsum, const PackedKq& xb, __m512 acc) {
  __m512i s[4];
  for (int v = 0; v < 4; ++v) s[v] = dot64<X8>(w[v], xh[v], xl[v]);
  const __m512i t = reduce_quads(s[0], s[1], s[2], s[3]);
  const __m512 dx = _mm512_load_ps(xb.q6_dx);
  if constexpr (Q3) {
    const __m512i off32 = _mm512_load_si512(xb.q6_off);                   // -32 * sum(qx) per sub-block
    const __m512i tq = _mm512_add_epi32(t, _mm512_srai_epi32(off32, 3));  // -4 * sum(qx)
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq), _mm512_mul_ps(scd, dx), acc);
  } else {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(scd, dx), acc);
    return _mm512_fnmadd_ps(mnd, xsum, acc);
  }
}

// The activation's sum per sub-block, dx * sum(qx), from its packing (Q2_K's mins
// multiply it): once per token and super-block, for all rows.
KQ_ATTR inline __m512 q23_xsum(const PackedKq& xb) {
  const __m512 dx = _mm512_load_ps(xb.q6_dx);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(xb.q6_off)), dx),
                       _mm512_set1_ps(-1.0f / 32.0f));
}

// R Q3_K (Q3) or Q2_K rows against NT tokens: each row's super-block unpacked once for
// all NT tokens (q23_unpack), each token's activation loaded once for all R rows.
// Token t's arithmetic does not depend on NT or R, so the one-row, one-token call
// (a mat-vec) and every batched one give a token the same floats.
template <int R, int NT, bool Q3, bool X8>
KQ_ATTR void rows_q23_k_tokens(const uint8_t* const* rows, int64_t blocks, const PackedKq* const* x,
                               float* const* out, const uint8_t* pf) {
  using Block = std::conditional_t<Q3, BlockQ3_K, BlockQ2_K>;
  const __m128i lane_idx = _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q6));
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  alignas(64) __m512i xh[NT][4], xl[NT][4];
  __m512 xsum[NT];
  for (int64_t b = 0; b < blocks; ++b) {
    if (pf) prefetch_nta(pf + b * R * static_cast<int64_t>(sizeof(Block)), R * sizeof(Block));
    for (int t = 0; t < NT; ++t) {
      for (int v = 0; v < 4; ++v) {
        xh[t][v] = _mm512_load_si512(x[t][b].hi + 64 * v);
        xl[t][v] = X8 ? _mm512_setzero_si512() : _mm512_load_si512(x[t][b].lo + 64 * v);  // int8: no low plane
      }
      xsum[t] = Q3 ? _mm512_setzero_ps() : q23_xsum(x[t][b]);
    }
    for (int r = 0; r < R; ++r) {
      __m512i w[4];
      __m512 scd, mnd;
      q23_unpack<Q3>(reinterpret_cast<const Block*>(rows[r])[b], lane_idx, w, scd, mnd);
      for (int t = 0; t < NT; ++t) acc[r][t] = q23_step<Q3, X8>(w, scd, mnd, xh[t], xl[t], xsum[t], x[t][b], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) out[t][r] = _mm512_reduce_add_ps(acc[r][t]);
}

// R Q3_K / Q2_K rows against one token (kquant_vnni_rows).
template <int R, bool Q3, bool X8>
KQ_ATTR void rows_q23_k(const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  const PackedKq* xs[1] = {x};
  float* outs[1] = {out};
  rows_q23_k_tokens<R, 1, Q3, X8>(rows, blocks, xs, outs, pf);
}

template <int R, bool X8>
void rows_rx(DType t, const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  if (t == DType::Q4_K) {
    rows_q45_k<R, false, X8>(rows, blocks, x, out, pf);
  } else if (t == DType::Q5_K) {
    rows_q45_k<R, true, X8>(rows, blocks, x, out, pf);
  } else if (t == DType::Q3_K) {
    rows_q23_k<R, true, X8>(rows, blocks, x, out, pf);
  } else if (t == DType::Q2_K) {
    rows_q23_k<R, false, X8>(rows, blocks, x, out, pf);
  } else {
    rows_q6_k<R, X8>(rows, blocks, x, out, pf);
  }
}

// R Q4_K (Q5_K) rows against NT tokens' packed activations: each row's quants,
// scales and mins unpacked once per super-block for all NT tokens (rows_q45_k unpacks
// them again for every token), each token's activation put in the nibbles' order once
// per super-block for all R rows. Token t's arithmetic is rows_q45_k's step for step,
// so it gets the floats it would alone. out[t][r]: row r's product with token t.
// (rows_q45_k is this at NT = 1 but kept apart: as a call of this one, one-token decode
// on int8 activations ran ~4% slower.)
template <int R, int NT, bool Q5, bool X8>
KQ_ATTR void rows_q45_k_tokens(const uint8_t* const* rows, int64_t blocks, const PackedKq* const* x,
                               float* const* out, const uint8_t* pf) {
  using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;
  const Q45Unpacker k = q45_unpacker();
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  alignas(64) __m512i xh[NT][4], xl[NT][4];
  for (int64_t b = 0; b < blocks; ++b) {
    if (pf) prefetch_nta(pf + b * R * static_cast<int64_t>(sizeof(Block)), R * sizeof(Block));
    for (int t = 0; t < NT; ++t) q45_activation<X8>(x[t][b], xh[t], xl[t]);
    for (int r = 0; r < R; ++r) {
      __m512i w[4];
      __m512 scd, mnd;
      q45_unpack<Q5>(k, reinterpret_cast<const Block*>(rows[r])[b], w, scd, mnd);
      for (int t = 0; t < NT; ++t) {
        const PackedKq& xb = x[t][b];
        __m512i sum[4];
        for (int v = 0; v < 4; ++v) sum[v] = dot64<X8>(w[v], xh[t][v], X8 ? xh[t][v] : xl[t][v]);  // int8: no low plane
        const __m512i tq = reduce_quads(sum[0], sum[1], sum[2], sum[3]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq), _mm512_mul_ps(scd, _mm512_load_ps(xb.q4_dx)), acc[r][t]);
        acc[r][t] = _mm512_fnmadd_ps(mnd, _mm512_load_ps(xb.q4_xsum), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) out[t][r] = _mm512_reduce_add_ps(acc[r][t]);
}

// R Q6_K rows against NT tokens (as rows_q45_k_tokens: each row's 6-bit quants and
// scales put together once per super-block for all NT tokens; rows_q6_k's arithmetic).
template <int R, int NT, bool X8>
KQ_ATTR void rows_q6_k_tokens(const uint8_t* const* rows, int64_t blocks, const PackedKq* const* x, float* const* out,
                              const uint8_t* pf) {
  const Q6Unpacker k = q6_unpacker();
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (pf) prefetch_nta(pf + b * R * static_cast<int64_t>(sizeof(BlockQ6_K)), R * sizeof(BlockQ6_K));
    for (int r = 0; r < R; ++r) {
      __m512i w[4];
      __m512 scd;
      q6_unpack(k, reinterpret_cast<const BlockQ6_K*>(rows[r])[b], w, scd);
      for (int t = 0; t < NT; ++t) {
        const PackedKq& xb = x[t][b];
        __m512i sum[4];
        for (int v = 0; v < 4; ++v)
          sum[v] = dot64<X8>(w[v], _mm512_load_si512(xb.hi + 64 * v), X8 ? _mm512_setzero_si512()
                                                                         : _mm512_load_si512(xb.lo + 64 * v));
        const __m512i tq = _mm512_add_epi32(reduce_quads(sum[0], sum[1], sum[2], sum[3]), _mm512_load_si512(xb.q6_off));
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq), _mm512_mul_ps(scd, _mm512_load_ps(xb.q6_dx)), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) out[t][r] = _mm512_reduce_add_ps(acc[r][t]);
}

// R rows of type T against NT tokens.
template <DType T, int R, int NT, bool X8>
KQ_ATTR void rows_tokens(const uint8_t* const* rows, int64_t blocks, const PackedKq* const* x, float* const* out,
                         const uint8_t* pf) {
  if constexpr (T == DType::Q6_K) {
    rows_q6_k_tokens<R, NT, X8>(rows, blocks, x, out, pf);
  } else if constexpr (T == DType::Q3_K || T == DType::Q2_K) {
    rows_q23_k_tokens<R, NT, T == DType::Q3_K, X8>(rows, blocks, x, out, pf);
  } else {
    rows_q45_k_tokens<R, NT, T == DType::Q5_K, X8>(rows, blocks, x, out, pf);
  }
}

template <DType T, int R, bool X8>
KQ_ATTR void rows_tokens_n(int nt, const uint8_t* const* rows, int64_t blocks, const PackedKq* const* x,
                           float* const* out, const uint8_t* pf) {
  switch (nt) {
    case 1: rows_tokens<T, R, 1, X8>(rows, blocks, x, out, pf); break;
    case 2: rows_tokens<T, R, 2, X8>(rows, blocks, x, out, pf); break;
    case 3: rows_tokens<T, R, 3, X8>(rows, blocks, x, out, pf); break;
    default: rows_tokens<T, R, 4, X8>(rows, blocks, x, out, pf); break;
  }
}

// Rows [r0, r1) in tiles of four rows by four tokens (for_row_token_tiles).
template <DType T, bool X8>
KQ_ATTR void kquant_tokens(const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t blocks,
                           const PackedKq* const* x, int n_tok, float* const* outs, const uint8_t* pf_end) {
  for_row_token_tiles(W, rb, r0, r1, n_tok, outs, pf_end,
                      [&](const uint8_t* const* rows, int nr, int t0, int nt, float* const* o, const uint8_t* pf) {
                        if (nr == kTileRows) {
                          rows_tokens_n<T, kTileRows, X8>(nt, rows, blocks, x + t0, o, pf);
                        } else {
                          rows_tokens_n<T, 1, X8>(nt, rows, blocks, x + t0, o, pf);
                        }
                      });
}

template <int R>
void rows_r(DType t, bool x8, const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out,
            const uint8_t* pf) {
  if (x8) {
    rows_rx<R, true>(t, rows, blocks, x, out, pf);
  } else {
    rows_rx<R, false>(t, rows, blocks, x, out, pf);
  }
}

}  // namespace

void kquant_vnni_rows(DType t, const uint8_t* const* rows, int R, int64_t blocks, const uint8_t* packed, bool x8,
                      float* out, const uint8_t* pf) {
  if (!dtype_is_kquant(t)) throw std::invalid_argument("moeflow: kquant_vnni_rows: not a k-quant");
  const auto* x = reinterpret_cast<const PackedKq*>(packed);
  switch (R) {
    case 1: rows_r<1>(t, x8, rows, blocks, x, out, pf); return;
    case 2: rows_r<2>(t, x8, rows, blocks, x, out, pf); return;
    case 3: rows_r<3>(t, x8, rows, blocks, x, out, pf); return;
    case 4: rows_r<4>(t, x8, rows, blocks, x, out, pf); return;
    default: throw std::invalid_argument("moeflow: kquant_vnni_rows: R must be 1..4");
  }
}

void kquant_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  if (cpu_has_avx512_vnni()) {
    pack_x_avx512(qx, dx, cols, out);
  } else {
    kquant_vnni_pack_x_reference(qx, dx, cols, out);
  }
}

void kquant_vnni_pack_x8(const float* x, int64_t cols, uint8_t* out) {
  if (cpu_has_avx512_vnni()) {
    pack_x8_avx512(x, cols, out);
  } else {
    kquant_vnni_pack_x8_reference(x, cols, out);
  }
}

bool kquant_vnni_tokens_type(DType t) { return dtype_is_kquant(t); }

void kquant_vnni_rows_tokens(DType t, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t blocks,
                             const uint8_t* const* packed, int n_tok, bool x8, float* const* outs,
                             const uint8_t* pf_end) {
  if (!kquant_vnni_tokens_type(t)) throw std::invalid_argument("moeflow: kquant_vnni_rows_tokens: not a k-quant");
  constexpr int kMaxTokens = 64;
  if (n_tok > kMaxTokens) {
    for (int t0 = 0; t0 < n_tok; t0 += kMaxTokens)
      kquant_vnni_rows_tokens(t, W, rb, r0, r1, blocks, packed + t0, std::min(kMaxTokens, n_tok - t0), x8, outs + t0,
                              pf_end);
    return;
  }
  const PackedKq* x[kMaxTokens];
  for (int i = 0; i < n_tok; ++i) x[i] = reinterpret_cast<const PackedKq*>(packed[i]);
  auto run = [&](auto type) {
    constexpr DType T = decltype(type)::value;
    if (x8) {
      kquant_tokens<T, true>(W, rb, r0, r1, blocks, x, n_tok, outs, pf_end);
    } else {
      kquant_tokens<T, false>(W, rb, r0, r1, blocks, x, n_tok, outs, pf_end);
    }
  };
  if (t == DType::Q4_K) run(std::integral_constant<DType, DType::Q4_K>{});
  else if (t == DType::Q5_K) run(std::integral_constant<DType, DType::Q5_K>{});
  else if (t == DType::Q3_K) run(std::integral_constant<DType, DType::Q3_K>{});
  else if (t == DType::Q2_K) run(std::integral_constant<DType, DType::Q2_K>{});
  else run(std::integral_constant<DType, DType::Q6_K>{});
}

bool kquant_avx512_dequant(DType t, const uint8_t* blocks, int64_t nb, float* y) {
  if (t == DType::Q4_K) {
    dequant_q4_k(reinterpret_cast<const BlockQ4_K*>(blocks), nb, y);
    return true;
  }
  if (t == DType::Q6_K) {
    dequant_q6_k(reinterpret_cast<const BlockQ6_K*>(blocks), nb, y);
    return true;
  }
  return false;
}

#else  // no VNNI kernel on this architecture: kquant_vnni_type() is false, never called

bool kquant_vnni_tokens_type(DType) { return false; }
void kquant_vnni_rows_tokens(DType, const uint8_t*, size_t, int64_t, int64_t, int64_t, const uint8_t* const*, int,
                             bool, float* const*, const uint8_t*) {
  throw std::logic_error("moeflow: kquant_vnni_rows_tokens without the VNNI kernel");
}

void kquant_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  kquant_vnni_pack_x_reference(qx, dx, cols, out);
}
void kquant_vnni_pack_x8(const float* x, int64_t cols, uint8_t* out) { kquant_vnni_pack_x8_reference(x, cols, out); }

bool kquant_avx512_dequant(DType, const uint8_t*, int64_t, float*) { return false; }

void kquant_vnni_rows(DType, const uint8_t* const*, int, int64_t, const uint8_t*, bool, float*, const uint8_t*) {
  throw std::logic_error("moeflow: kquant_vnni_rows without the VNNI kernel");
}

#endif

}  // namespace moeflow::cpu
