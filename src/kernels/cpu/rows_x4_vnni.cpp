// Kernels for rows interleaved in fours; see rows_x4_vnni.h, and vnni_target.h for
// how the file builds.
#include "kernels/cpu/vnni_target.h"  // first: its pragmas must precede immintrin.h
#include "kernels/cpu/rows_x4_vnni.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kquant_scales.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/quantize_x8.h"
#include "kernels/cpu/rows_x4_kquant.h"
#include "kernels/cpu/rows_x4_steps.h"
#include "tensor/iquants.h"
#include "tensor/rows_x4.h"

namespace moeflow::cpu {

bool rows_x4_pair_pays(DType t, bool x_int8, int n_tok) {
  // int16: q4_0's kernel tiles two quads at any count of tokens; q8_0's tiles two quads
  // only by two tokens (by more they need more registers than there are) and takes one
  // quad by three or four, where a pair of such one-quad tiles streamed no faster
  // (docs/performance.md, 2026-12-07, eighth session).
  if (!x_int8) return t == DType::Q4_0 ? n_tok > 1 : t == DType::Q8_0 && n_tok == 2;
  return n_tok > (t == DType::Q8_0 ? 4 : 2);
}

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
namespace {

// One group of 128 columns of the activation.
struct alignas(16) PackedX4 {
  int8_t hi[8][16];      // [k]: dword b = the high bytes of block b's elements 4k..4k+3
  uint8_t lo[8][16];     // [k]: dword b = their low bytes
  int32_t q4_offset[4];  // block b: -8 * sum of its 32 elements (the nibbles' offset)
  int32_t q8_offset[4];  // block b: -128 * sum of its 32 high bytes (w + 128 against hi)
  float dx[4];           // block b's activation scale
};
static_assert(sizeof(PackedX4) == kRowsX4XGroupBytes);

MOEFLOW_VNNI_ATTR inline __m512i bcast(const void* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// kIq4Levels + 128 (1..241, unsigned) in each 128-bit lane: iq4_nl's nibbles as the
// unsigned operand of a multiply-add, by one byte shuffle.
MOEFLOW_VNNI_ATTR inline __m512i iq4_levels_unsigned() {
  alignas(16) uint8_t lut[16];
  for (int i = 0; i < 16; ++i) lut[i] = static_cast<uint8_t>(kIq4Levels[i] + 128);
  return bcast(lut);
}

// iq4_xs: lane i = 4r + b's scale d_r (ls - 32) for half h of a super-block, from its 32
// bytes of scales (tensor/rows_x4.h).
MOEFLOW_VNNI_ATTR inline __m512 iq4_xs_group_scales(const uint8_t* sc, int h) {
  const __m512 d4 = _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
  const __m512 d = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), d4);
  const __m512i low = _mm512_and_si512(
      _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 8))), 4 * h),
      _mm512_set1_epi32(0xf));
  uint32_t top;
  std::memcpy(&top, sc + 24 + 4 * h, 4);
  const __m512i shifts = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i high = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(top)), shifts),
                                        _mm512_set1_epi32(3));
  const __m512i ls = _mm512_or_si512(low, _mm512_slli_epi32(high, 4));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
}

// A weight vector, loaded once into a register. Where one load feeds two instructions
// (a nibble's AND and its shift; q8_0's bytes as the signed operand and, offset, the
// unsigned one) GCC folds it into both, and from cache these kernels are bound by their
// loads as much as by their multiply-adds (docs/performance.md, 2026-11-28).
MOEFLOW_VNNI_ATTR inline __m512i load_weights(const uint8_t* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));  // opaque to the compiler: the value stays in this register
  return v;
}

// A group's four blocks of 32 bytes, block-major (blocks[b]: dword k holds elements
// 4k..4k+3), to the packed activation's step-major order: steps[k] holds dword k of
// blocks 0-3 (dword 4k + b of the two vectors stored). vpermt2d picks from blocks 0-1
// (index < 16) and blocks 2-3.
MOEFLOW_VNNI_ATTR inline void steps_of_blocks(const int8_t (*blocks)[32], int8_t (*steps)[16]) {
  const __m512i first = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
  const __m512i b01 = _mm512_load_si512(blocks[0]), b23 = _mm512_load_si512(blocks[2]);
  _mm512_storeu_si512(steps[0], _mm512_permutex2var_epi32(b01, first, b23));
  _mm512_storeu_si512(steps[4], _mm512_permutex2var_epi32(b01, _mm512_add_epi32(first, _mm512_set1_epi32(4)), b23));
}

MOEFLOW_VNNI_ATTR void pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  auto* groups = reinterpret_cast<PackedX4*>(out);
  const __m512i ones = _mm512_set1_epi16(1);
  for (int64_t g = 0; g < cols / 128; ++g) {
    alignas(64) int8_t hi[4][32], lo[4][32];
    PackedX4& p = groups[g];
    for (int b = 0; b < 4; ++b) {
      const __m512i v = _mm512_loadu_si512(qx + 128 * g + 32 * b);
      const __m512i h = _mm512_srai_epi16(v, 8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lo[b]), _mm512_cvtepi16_epi8(v));  // truncates: low bytes
      _mm256_store_si256(reinterpret_cast<__m256i*>(hi[b]), _mm512_cvtepi16_epi8(h));
      p.q4_offset[b] = -8 * _mm512_reduce_add_epi32(_mm512_madd_epi16(v, ones));
      p.q8_offset[b] = -128 * _mm512_reduce_add_epi32(_mm512_madd_epi16(h, ones));
      p.dx[b] = dx[4 * g + b];
    }
    steps_of_blocks(hi, p.hi);
    steps_of_blocks(lo, reinterpret_cast<int8_t(*)[16]>(p.lo));
  }
}

// acc + the sums of four rows over one group (16 lanes, 4r + b), converted and scaled
// (one rounding for the product of the scales, one for the multiply-add, as the
// GGUF-layout q4_0 kernel does).
MOEFLOW_VNNI_ATTR inline __m512 add_scaled(__m512 acc, __m512i hi, __m512i lo, const uint8_t* scales,
                                           const PackedX4& p) {
  const __m512i s = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
  const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales))),
                                 _mm512_broadcast_f32x4(_mm_loadu_ps(p.dx)));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
}

// A quad's four row sums from its accumulator (lanes 4r + b: row r, block b), the
// blocks in the order the GGUF-layout q4_0 kernel adds them (same floats). One
// permute puts block b of the four rows in 128-bit lane b; three vector adds follow.
// (Through memory and sixteen scalar loads it was ~30 instructions per quad and token,
// a fifth of a two-quad, four-token tile's time at 768 columns.)
MOEFLOW_VNNI_ATTR inline void store_rows(__m512 acc, float* out) {
  const __m512 v = _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), acc);
  const __m128 b01 = _mm_add_ps(_mm512_castps512_ps128(v), _mm512_extractf32x4_ps(v, 1));
  _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(b01, _mm512_extractf32x4_ps(v, 2)), _mm512_extractf32x4_ps(v, 3)));
}

// The sums of NQ quads over one group (quad j's quant bytes at q[j]) into hi[j], lo[j],
// each broadcast of the activation loaded once for all NQ: for one quad a group takes
// 16 broadcasts against 4 (q4_0) or 8 (q8_0) weight loads (see quads_multi).
// Step s multiplies two weight vectors a, b of each quad: against hi they enter
// unsigned, against lo signed. q4_0: vector s holds elements 4s..4s+3 in its low
// nibbles (a) and 16+4s.. in its high ones (b), both 0..15 either way; the offset of 8
// comes off with -8 * sum(x) (lo's start). q8_0: vectors 2s and 2s+1 hold elements
// 8s..8s+3 and 8s+4..8s+7, signed; against hi as w + 128 (w ^ 0x80), corrected by
// -128 * sum(hi) (hi's start). Four accumulators per quad split the dependency chain
// of its 16 multiply-adds.
template <DType T, int NQ>
MOEFLOW_VNNI_ATTR inline void group_sums(const uint8_t* const* q, const PackedX4& p, __m512i* hi, __m512i* lo) {
  constexpr bool kQ4 = T == DType::Q4_0;
  const __m512i nibble = _mm512_set1_epi8(0x0f), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i hi0[NQ], hi1[NQ], lo0[NQ], lo1[NQ];
#pragma GCC unroll 4
  for (int j = 0; j < NQ; ++j) {
    hi1[j] = lo1[j] = _mm512_setzero_si512();
    hi0[j] = kQ4 ? _mm512_setzero_si512() : bcast(p.q8_offset);
    lo0[j] = kQ4 ? bcast(p.q4_offset) : _mm512_setzero_si512();
  }
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const int ka = kQ4 ? s : 2 * s, kb = kQ4 ? 4 + s : 2 * s + 1;  // the activation's steps
    const __m512i xh0 = bcast(p.hi[ka]), xh1 = bcast(p.hi[kb]);
    const __m512i xl0 = bcast(p.lo[ka]), xl1 = bcast(p.lo[kb]);
#pragma GCC unroll 4
    for (int j = 0; j < NQ; ++j) {
      __m512i ua, ub, sa, sb;  // a and b, unsigned (against hi) and signed (against lo)
      if constexpr (kQ4) {
        const __m512i w = load_weights(q[j] + 64 * s);
        ua = sa = _mm512_and_si512(w, nibble);
        ub = sb = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
      } else {
        sa = load_weights(q[j] + 128 * s);
        sb = load_weights(q[j] + 128 * s + 64);
        ua = _mm512_xor_si512(sa, bias);
        ub = _mm512_xor_si512(sb, bias);
      }
      hi0[j] = _mm512_dpbusd_epi32(hi0[j], ua, xh0);
      hi1[j] = _mm512_dpbusd_epi32(hi1[j], ub, xh1);
      lo0[j] = _mm512_dpbusd_epi32(lo0[j], xl0, sa);
      lo1[j] = _mm512_dpbusd_epi32(lo1[j], xl1, sb);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NQ; ++j) {
    hi[j] = _mm512_add_epi32(hi0[j], hi1[j]);
    lo[j] = _mm512_add_epi32(lo0[j], lo1[j]);
  }
}

template <DType T>
constexpr int64_t kQuadQuant = T == DType::Q8_0 ? 512 : 256;  // a quad's quant bytes per group
template <DType T>
constexpr int64_t kQuadBits = rows_x4_group_bit_bytes(T);  // high-bit bytes per group
template <DType T>  // scale bytes per group (the super-block types': half a super-block's)
constexpr int64_t kQuadScales = T == DType::Q6_K     ? kRowsX4Q6KScaleBytes / 2
                                : T == DType::IQ4_XS ? kRowsX4Iq4XsScaleBytes / 2
                                                     : rows_x4_group_scale_bytes(T);
template <DType T>
constexpr int64_t kQuadStep = kQuadQuant<T> + kQuadBits<T> + kQuadScales<T>;  // a quad's bytes per group

// NQ quads (`groups` groups each, quad j at quad[j]) into out[j][0, 4), from one packed
// activation; quad j prefetches pf[j] (null: none) at the pace it reads.
template <DType T, int NQ>
MOEFLOW_VNNI_ATTR inline void quad_set(const uint8_t* const* quad, int64_t groups, const PackedX4* x,
                                       float* const* out, const uint8_t* const* pf) {
  constexpr int64_t kQuant = kQuadQuant<T>, kStep = kQuadStep<T>;
  __m512 acc[NQ];
#pragma GCC unroll 4
  for (int j = 0; j < NQ; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* q[NQ];
    __m512i hi[NQ], lo[NQ];
#pragma GCC unroll 4
    for (int j = 0; j < NQ; ++j) {
      if (pf[j]) prefetch_lines_nta(pf[j] + g * kStep, kStep, g == 0);
      q[j] = quad[j] + g * kQuant;
    }
    group_sums<T, NQ>(q, x[g], hi, lo);
#pragma GCC unroll 4
    for (int j = 0; j < NQ; ++j)
      acc[j] = add_scaled(acc[j], hi[j], lo[j], quad[j] + groups * kQuant + g * kRowsX4GroupScaleBytes, x[g]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < NQ; ++j) store_rows(acc[j], out[j]);
}

// The tiles a multi-token kernel walks one matrix's n_quads quads in: one quad a tile
// (One), or two, taken from the range's two halves (Halves: quad k and quad k + half)
// or side by side (Adjacent: quads 2k and 2k + 1); a tile of two whose second quad
// would lie past the range holds one. Two halves are two memory streams, as a pair of
// matrices is (rows_x4_pair_pays), which keeps more reads in flight beside the
// arithmetic than adjacent quads (docs/performance.md, 2026-12-07, eighth session).
enum class QuadTiling { One, Adjacent, Halves };
class QuadTiles {
 public:
  QuadTiles(int64_t n_quads, QuadTiling how)
      : n_(n_quads), how_(how), half_(how == QuadTiling::Halves ? (n_quads + 1) / 2 : 0) {}
  int64_t count() const { return how_ == QuadTiling::One ? n_ : (n_ + 1) / 2; }
  // Tile k's quads into at[0] and at[1]; how many it holds (1 or 2).
  int at(int64_t k, int64_t* at) const {
    at[0] = how_ == QuadTiling::Adjacent ? 2 * k : k;
    at[1] = how_ == QuadTiling::One ? n_ : how_ == QuadTiling::Adjacent ? 2 * k + 1 : k + half_;
    return at[1] < n_ ? 2 : 1;
  }

 private:
  int64_t n_;
  QuadTiling how_;
  int64_t half_;
};

// Where quad i of a matrix (quads qb bytes apart) prefetches: the quad
// kRowsX4PrefetchQuads on when that starts before pf_end, else nowhere.
inline const uint8_t* prefetch_of(const uint8_t* W, int64_t i, size_t qb, const uint8_t* pf_end,
                                  int64_t distance = kRowsX4PrefetchQuads) {
  const uint8_t* ahead = W + static_cast<size_t>(i + distance) * qb;
  return ahead < pf_end ? ahead : nullptr;
}

// Quad i of a matrix alone, into out[4i, 4i + 4).
template <DType T>
MOEFLOW_VNNI_ATTR inline void one_quad(const uint8_t* W, int64_t i, size_t qb, int64_t groups, const PackedX4* x,
                                       float* out, const uint8_t* pf_end) {
  const uint8_t* q[1] = {W + static_cast<size_t>(i) * qb};
  const uint8_t* pf[1] = {prefetch_of(W, i, qb, pf_end)};
  float* o[1] = {out + 4 * i};
  quad_set<T, 1>(q, groups, x, o, pf);
}

template <DType T>
MOEFLOW_VNNI_ATTR void quads(const uint8_t* W, int64_t n_quads, int64_t cols, const PackedX4* x, float* out,
                             const uint8_t* pf_end) {
  const int64_t groups = cols / kRowsX4GroupCols;
  const size_t qb = static_cast<size_t>(groups * kQuadStep<T>);
  for (int64_t i = 0; i < n_quads; ++i) one_quad<T>(W, i, qb, groups, x, out, pf_end);
}

// Several matrices' quads in turn (see rows_x4_quads_multi). Two that share their
// activation (an expert's gate and up; k and v) take their quads i together from one
// set of broadcasts: the same bytes in the same order, fewer instructions. One Zen 5
// core, 768 columns, from L2: q4_0 66 -> 78 GB/s, q8_0 88 -> 99 GB/s. (Two adjacent
// quads of one matrix read together this way gained as much from L2 but made the
// model's decode 5-8% slower in 3 of 3 alternating runs; not kept.)
template <DType T>
MOEFLOW_VNNI_ATTR void quads_multi(const RowsX4Stream* s, int n, int64_t n_quads, int64_t cols) {
  const int64_t groups = cols / kRowsX4GroupCols;
  const size_t qb = static_cast<size_t>(groups * kQuadStep<T>);
  if (n == 2 && s[0].x == s[1].x) {
    const auto* x = reinterpret_cast<const PackedX4*>(s[0].x);
    for (int64_t i = 0; i < n_quads; ++i) {
      const uint8_t* q[2] = {s[0].W + static_cast<size_t>(i) * qb, s[1].W + static_cast<size_t>(i) * qb};
      const uint8_t* pf[2] = {prefetch_of(s[0].W, i, qb, s[0].pf_end), prefetch_of(s[1].W, i, qb, s[1].pf_end)};
      float* o[2] = {s[0].out + 4 * i, s[1].out + 4 * i};
      quad_set<T, 2>(q, groups, x, o, pf);
    }
    return;
  }
  for (int64_t i = 0; i < n_quads; ++i)
    for (int k = 0; k < n; ++k)
      one_quad<T>(s[k].W, i, qb, groups, reinterpret_cast<const PackedX4*>(s[k].x), s[k].out, s[k].pf_end);
}

// One quad against NT tokens' packed activations: each weight vector is loaded (and
// its nibbles split, or its bias flipped) once for all NT, then multiplied with every
// token's broadcasts as group_sums does for one. The integer sums are exact and the
// float steps per token are add_scaled's in group order, so token t gets the floats
// one_quad gives it alone.
template <DType T, int NT>
MOEFLOW_VNNI_ATTR inline void quad_tokens(const uint8_t* quad, int64_t groups, const PackedX4* const* x,
                                          float* const* out, const uint8_t* pf) {
  constexpr bool kQ4 = T == DType::Q4_0;
  constexpr int64_t kQuant = kQuadQuant<T>;
  const __m512i nibble = _mm512_set1_epi8(0x0f), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    if (pf) prefetch_lines_nta(pf + g * kQuadStep<T>, kQuadStep<T>, g == 0);
    const uint8_t* q = quad + g * kQuant;
    __m512i hi0[NT], hi1[NT], lo0[NT], lo1[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      hi1[t] = lo1[t] = _mm512_setzero_si512();
      hi0[t] = kQ4 ? _mm512_setzero_si512() : bcast(x[t][g].q8_offset);
      lo0[t] = kQ4 ? bcast(x[t][g].q4_offset) : _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const int ka = kQ4 ? s : 2 * s, kb = kQ4 ? 4 + s : 2 * s + 1;
      __m512i ua, ub, sa, sb;
      if constexpr (kQ4) {
        const __m512i w = load_weights(q + 64 * s);
        ua = sa = _mm512_and_si512(w, nibble);
        ub = sb = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
      } else {
        sa = load_weights(q + 128 * s);
        sb = load_weights(q + 128 * s + 64);
        ua = _mm512_xor_si512(sa, bias);
        ub = _mm512_xor_si512(sb, bias);
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const PackedX4& p = x[t][g];
        hi0[t] = _mm512_dpbusd_epi32(hi0[t], ua, bcast(p.hi[ka]));
        hi1[t] = _mm512_dpbusd_epi32(hi1[t], ub, bcast(p.hi[kb]));
        lo0[t] = _mm512_dpbusd_epi32(lo0[t], bcast(p.lo[ka]), sa);
        lo1[t] = _mm512_dpbusd_epi32(lo1[t], bcast(p.lo[kb]), sb);
      }
    }
    const uint8_t* scales = quad + groups * kQuant + g * kRowsX4GroupScaleBytes;
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      acc[t] = add_scaled(acc[t], _mm512_add_epi32(hi0[t], hi1[t]), _mm512_add_epi32(lo0[t], lo1[t]), scales, x[t][g]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) store_rows(acc[t], out[t]);
}

// NQ quads against NT tokens' int16 activations, into out[j * NT + t] (tile8's
// shape on quad_tokens' arithmetic): each broadcast of a token's bytes feeds the
// multiply-adds of all NQ quads. Two accumulators per quad and token (against hi and
// against lo); the integer sums are exact, so token t gets one_quad's floats.
template <DType T, int NQ, int NT>
MOEFLOW_VNNI_ATTR inline void tile16(const uint8_t* const* q, int64_t groups, const PackedX4* const* x,
                                     float* const* out, const uint8_t* const* pf) {
  constexpr bool kQ4 = T == DType::Q4_0;
  constexpr int64_t kQuant = kQuadQuant<T>;
  const __m512i nibble = _mm512_set1_epi8(0x0f), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NQ][NT];
#pragma GCC unroll 2
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[j][t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i hi[NQ][NT], lo[NQ][NT];
#pragma GCC unroll 2
    for (int j = 0; j < NQ; ++j) {
      if (pf[j]) prefetch_lines_nta(pf[j] + g * kQuadStep<T>, kQuadStep<T>, g == 0);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        hi[j][t] = kQ4 ? _mm512_setzero_si512() : bcast(x[t][g].q8_offset);
        lo[j][t] = kQ4 ? bcast(x[t][g].q4_offset) : _mm512_setzero_si512();
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const int ka = kQ4 ? s : 2 * s, kb = kQ4 ? 4 + s : 2 * s + 1;
      __m512i ua[NQ], ub[NQ], sa[NQ], sb[NQ];
#pragma GCC unroll 2
      for (int j = 0; j < NQ; ++j) {
        const uint8_t* w = q[j] + g * kQuant;
        if constexpr (kQ4) {
          const __m512i v = load_weights(w + 64 * s);
          ua[j] = sa[j] = _mm512_and_si512(v, nibble);
          ub[j] = sb[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        } else {
          sa[j] = load_weights(w + 128 * s);
          sb[j] = load_weights(w + 128 * s + 64);
          ua[j] = _mm512_xor_si512(sa[j], bias);
          ub[j] = _mm512_xor_si512(sb[j], bias);
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const PackedX4& p = x[t][g];
        const __m512i xh0 = bcast(p.hi[ka]), xh1 = bcast(p.hi[kb]);
        const __m512i xl0 = bcast(p.lo[ka]), xl1 = bcast(p.lo[kb]);
#pragma GCC unroll 2
        for (int j = 0; j < NQ; ++j) {
          hi[j][t] = _mm512_dpbusd_epi32(hi[j][t], ua[j], xh0);
          hi[j][t] = _mm512_dpbusd_epi32(hi[j][t], ub[j], xh1);
          lo[j][t] = _mm512_dpbusd_epi32(lo[j][t], xl0, sa[j]);
          lo[j][t] = _mm512_dpbusd_epi32(lo[j][t], xl1, sb[j]);
        }
      }
    }
#pragma GCC unroll 2
    for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
        acc[j][t] = add_scaled(acc[j][t], hi[j][t], lo[j][t], q[j] + groups * kQuant + g * kRowsX4GroupScaleBytes, x[t][g]);
  }
#pragma GCC unroll 2
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) store_rows(acc[j][t], out[j * NT + t]);
}

// tile16 for a run-time number of tokens, nt in [1, 3].
template <DType T, int NQ>
MOEFLOW_VNNI_ATTR inline void tile16_n(int nt, const uint8_t* const* q, int64_t groups, const PackedX4* const* x,
                                       float* const* out, const uint8_t* const* pf) {
  switch (nt) {
    case 1: tile16<T, NQ, 1>(q, groups, x, out, pf); break;
    case 2: tile16<T, NQ, 2>(q, groups, x, out, pf); break;
    default: tile16<T, NQ, 3>(q, groups, x, out, pf); break;
  }
}

// Tokens in the next int16 pass of tile16 over two quads when `left` remain: two, but
// three for q4_0 where that saves a pass (3, 5, 6, 7, ...; one core from cache, 768
// columns: three tokens 154-163 -> 182 G multiply-adds/s, five 172 -> 182): its nibbles
// serve both byte planes as one register, so a tile of two quads by three still fits.
template <DType T>
constexpr int tokens_in_pass16(int left) {
  return T == DType::Q4_0 && left != 4 && left > 2 ? 3 : std::min(2, left);
}

// One matrix against n_tok int16 activations (rows_x4_quads_tokens), two quads at a
// time. q4_0 takes tiles of two quads by two or three tokens (tokens_in_pass16; one Zen
// 5 core from L2, 2048 columns, two tokens: 4.4 -> 5.6 G multiply-adds/s against
// quad_tokens' one quad by four); q8_0,
// whose tiles need twice the weight registers, only for its last one or two tokens
// (2.8 -> 3.8 at two tokens; 4.5 -> 4.0 at four, where quad_tokens stays).
template <DType T>
MOEFLOW_VNNI_ATTR void quads_tokens(const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* const* xs,
                                    int n_tok, float* const* outs, const uint8_t* pf_end) {
  const int64_t groups = cols / kRowsX4GroupCols;
  const size_t qb = static_cast<size_t>(groups * kQuadStep<T>);
  // Halves for q4_0's tiles and q8_0's by two tokens; q8_0's one-quad tiles of three or
  // four tokens (below) streamed slower from two places, so they keep adjacent quads.
  const QuadTiles tiles(n_quads, T == DType::Q4_0 || n_tok == 2 ? QuadTiling::Halves : QuadTiling::Adjacent);
  for (int64_t k = 0; k < tiles.count(); ++k) {
    int64_t at[2];
    const int nq = tiles.at(k, at);
    const uint8_t* q[2] = {W + static_cast<size_t>(at[0]) * qb, W + static_cast<size_t>(at[1]) * qb};
    for (int t0 = 0; t0 < n_tok;) {
      const int left = n_tok - t0;
      // The first pass over the quads prefetches at the pace it reads, as one_quad
      // does; the others read them from cache.
      const uint8_t* pf[2] = {t0 == 0 ? prefetch_of(W, at[0], qb, pf_end) : nullptr,
                              t0 == 0 && nq == 2 ? prefetch_of(W, at[1], qb, pf_end) : nullptr};
      if (T == DType::Q8_0 && left >= 3) {
        const int nt = std::min(4, left);
        const PackedX4* x[4];
        for (int t = 0; t < nt; ++t) x[t] = reinterpret_cast<const PackedX4*>(xs[t0 + t]);
        for (int j = 0; j < nq; ++j) {
          float* o[4];
          for (int t = 0; t < nt; ++t) o[t] = outs[t0 + t] + 4 * at[j];
          if (nt == 4) {
            quad_tokens<T, 4>(q[j], groups, x, o, pf[j]);
          } else {
            quad_tokens<T, 3>(q[j], groups, x, o, pf[j]);
          }
        }
        t0 += nt;
        continue;
      }
      const int nt = tokens_in_pass16<T>(left);
      const PackedX4* x[3];
      float* o[6];
      for (int t = 0; t < nt; ++t) {
        x[t] = reinterpret_cast<const PackedX4*>(xs[t0 + t]);
        for (int j = 0; j < nq; ++j) o[j * nt + t] = outs[t0 + t] + 4 * at[j];
      }
      if (nq == 2) {
        tile16_n<T, 2>(nt, q, groups, x, o, pf);
      } else {
        tile16_n<T, 1>(nt, q, groups, x, o, pf);
      }
      t0 += nt;
    }
  }
}

// One group of 128 columns of an int8 activation (rows_x4_pack_x8).
struct alignas(16) PackedX8 {
  int8_t x[8][16];       // [k]: dword b = block b's elements 4k..4k+3
  int32_t q4_offset[4];  // block b: -8 * sum of its 32 values (the nibbles' offset)
  int32_t q8_offset[4];  // block b: -128 * sum of its 32 values (w + 128 against x)
  float dx[4];           // block b's scale
  float xsum[4];         // block b's scale times the sum of its 32 values (Q4_K's mins multiply it)
  int32_t q6_offset[2][4];  // [half][b]: -32 * the sum of block b's values 16 half .. 16 half + 15 (Q6_K)
};
static_assert(sizeof(PackedX8) == kRowsX4X8GroupBytes);

MOEFLOW_VNNI_ATTR void pack_x8(const float* x, int64_t cols, uint8_t* out) {
  auto* groups = reinterpret_cast<PackedX8*>(out);
  for (int64_t g = 0; g < cols / 128; ++g) {
    PackedX8& p = groups[g];
    alignas(64) int8_t q[4][32];
    for (int b = 0; b < 4; ++b) {
      const X8BlockAvx512 k = quantize_x8_block_avx512(x + 128 * g + 32 * b);
      const int32_t sum0 = _mm512_reduce_add_epi32(k.q0), sum1 = _mm512_reduce_add_epi32(k.q1);
      const int32_t sum = sum0 + sum1;
      p.q6_offset[0][b] = -32 * sum0;
      p.q6_offset[1][b] = -32 * sum1;
      p.q4_offset[b] = -8 * sum;
      p.q8_offset[b] = -128 * sum;
      p.dx[b] = k.d;
      p.xsum[b] = k.d * static_cast<float>(sum);
      _mm_store_si128(reinterpret_cast<__m128i*>(q[b]), _mm512_cvtsepi32_epi8(k.q0));
      _mm_store_si128(reinterpret_cast<__m128i*>(q[b] + 16), _mm512_cvtsepi32_epi8(k.q1));
    }
    steps_of_blocks(q, p.x);
  }
}

// NQ quads (quad j at q[j], `groups` groups each) against NT tokens' int8
// activations, into out[j * NT + t][0, 4): a tile, as a mat-mul kernel holds one. The
// weights are the unsigned operand throughout (q4_0: the nibbles, offset -8 * sum(x);
// q8_0: w + 128, offset -128 * sum(x)), so a weight vector takes one multiply-add per
// token. Why a tile of two quads: a 16-byte broadcast of the activation per multiply-add
// held one Zen 5 core to ~5.5 G multiply-adds/s against 8.1 G with register operands;
// each broadcast feeding both quads' multiply-adds halves the loads. Two quads by four
// tokens keep 8 integer and 8 float accumulators, 8 independent chains.
//
// q5_0: q4_0's nibbles plus 16 where a fifth bit is set (a masked add per weight
// vector), offset -16 * sum(x). iq4_nl / iq4_xs: q4_0's nibbles looked up as
// kIq4Levels + 128 (one byte shuffle per weight vector), offset -128 * sum(x) as
// q8_0's. q4_1 / q5_1: the same unsigned quants without an offset; each lane adds its
// minimum m times the activation's block sum (xsum).
// Q4_K (tensor/rows_x4.h): q4_0's nibbles without its offset of 8 (Q5_K: plus 16 where
// a fifth bit is set, as q5_0); instead each lane
// (row r, sub-block b) takes d * scale times its sum and, subtracted, dmin * min times
// the activation's sum over the sub-block (q4_k_group_scales).
template <DType T, int NQ, int NT>
MOEFLOW_VNNI_ATTR inline void tile8(const uint8_t* const* q, int64_t groups, const PackedX8* const* x,
                                    float* const* out, const uint8_t* const* pf) {
  constexpr bool kK = T == DType::Q4_K || T == DType::Q5_K;
  constexpr bool kQ6 = T == DType::Q6_K;
  constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;  // x = d q + m
  constexpr bool kXS = T == DType::IQ4_XS;                      // x = d (ls - 32) kIq4Levels[q]
  constexpr bool kNL = T == DType::IQ4_NL || kXS;               // x = d kIq4Levels[q]
  constexpr bool kQ4 = T == DType::Q4_0 || T == DType::Q5_0 || kMin || kNL || kK || kQ6;  // nibbles
  constexpr bool kQ5 = T == DType::Q5_0 || T == DType::Q5_1 || T == DType::Q5_K;
  constexpr int64_t kQuant = kQuadQuant<T>;
  const __m512i nibble = _mm512_set1_epi8(0x0f), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  [[maybe_unused]] const __m512i k16 = _mm512_set1_epi8(16), k30 = _mm512_set1_epi8(0x30);
  [[maybe_unused]] __m512i levels;
  if constexpr (kNL) levels = iq4_levels_unsigned();
  __m512 acc[NQ][NT];
#pragma GCC unroll 2
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[j][t] = _mm512_setzero_ps();
  [[maybe_unused]] Q4KSuperBlock sb[NQ];  // Q4_K: the current super-block's scales, decoded
  for (int64_t g = 0; g < groups; ++g) {
    __m512i sum[NQ][NT];
    [[maybe_unused]] __m512i sumb[NQ][NT];  // Q6_K: the blocks' second halves, scaled apart
#pragma GCC unroll 2
    for (int j = 0; j < NQ; ++j) {
      if (pf[j]) prefetch_lines_nta(pf[j] + g * kQuadStep<T>, kQuadStep<T>, g == 0);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        if constexpr (kQ6) {
          sum[j][t] = bcast(x[t][g].q6_offset[0]);
          sumb[j][t] = bcast(x[t][g].q6_offset[1]);
        } else {
          sum[j][t] = kK || kMin          ? _mm512_setzero_si512()
                      : T == DType::Q5_0 ? _mm512_slli_epi32(bcast(x[t][g].q4_offset), 1)  // -16 * sum
                                          : bcast(kQ4 && !kNL ? x[t][g].q4_offset : x[t][g].q8_offset);
        }
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const int ka = kQ4 ? s : 2 * s, kb = kQ4 ? 4 + s : 2 * s + 1;
      __m512i ua[NQ], ub[NQ];
#pragma GCC unroll 2
      for (int j = 0; j < NQ; ++j) {
        const uint8_t* w = q[j] + g * kQuant;
        if constexpr (kQ4) {
          const __m512i v = load_weights(w + 64 * s);
          ua[j] = _mm512_and_si512(v, nibble);
          ub[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
          if constexpr (kQ5) {  // the fifth bits: 16 where set
            const uint8_t* bits = q[j] + groups * kQuant + g * kQuadBits<T> + 16 * s;
            uint64_t ma, mb;
            std::memcpy(&ma, bits, 8);
            std::memcpy(&mb, bits + 8, 8);
            ua[j] = _mm512_mask_add_epi8(ua[j], _cvtu64_mask64(ma), ua[j], k16);
            ub[j] = _mm512_mask_add_epi8(ub[j], _cvtu64_mask64(mb), ub[j], k16);
          }
          if constexpr (kNL) {
            ua[j] = _mm512_shuffle_epi8(levels, ua[j]);
            ub[j] = _mm512_shuffle_epi8(levels, ub[j]);
          }
          if constexpr (kQ6) {  // the top two bits into bits 4-5 (tensor/rows_x4.h)
            const __m512i top = _mm512_loadu_si512(q[j] + groups * kQuant + g * kQuadBits<T> + 64 * (s % 2));
            const __m512i ta = s < 2 ? top : _mm512_slli_epi16(top, 4), tb = s < 2 ? _mm512_srli_epi16(top, 2)
                                                                              : _mm512_slli_epi16(top, 2);
            ua[j] = _mm512_or_si512(ua[j], _mm512_and_si512(ta, k30));
            ub[j] = _mm512_or_si512(ub[j], _mm512_and_si512(tb, k30));
          }
        } else {
          ua[j] = _mm512_xor_si512(_mm512_loadu_si512(w + 128 * s), bias);
          ub[j] = _mm512_xor_si512(_mm512_loadu_si512(w + 128 * s + 64), bias);
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512i xa = bcast(x[t][g].x[ka]), xb = bcast(x[t][g].x[kb]);
#pragma GCC unroll 2
        for (int j = 0; j < NQ; ++j) {
          sum[j][t] = _mm512_dpbusd_epi32(sum[j][t], ua[j], xa);
          if constexpr (kQ6) sumb[j][t] = _mm512_dpbusd_epi32(sumb[j][t], ub[j], xb);
          else sum[j][t] = _mm512_dpbusd_epi32(sum[j][t], ub[j], xb);
        }
      }
    }
    if constexpr (kQ6) {
      Q6KGroupScales sc[NQ];
#pragma GCC unroll 2
      for (int j = 0; j < NQ; ++j) sc[j] = q6_k_group_scales(q[j] + groups * (kQuant + kQuadBits<T>) +
                                                              (g / 2) * kRowsX4Q6KScaleBytes, g % 2);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t][g].dx));
#pragma GCC unroll 2
        for (int j = 0; j < NQ; ++j) {
          acc[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][t]), _mm512_mul_ps(sc[j].a, dx), acc[j][t]);
          acc[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumb[j][t]), _mm512_mul_ps(sc[j].b, dx), acc[j][t]);
        }
      }
    } else if constexpr (kXS) {
      __m512 sc[NQ];
#pragma GCC unroll 2
      for (int j = 0; j < NQ; ++j)
        sc[j] = iq4_xs_group_scales(q[j] + groups * kQuant + (g / 2) * kRowsX4Iq4XsScaleBytes, static_cast<int>(g % 2));
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t][g].dx));
#pragma GCC unroll 2
        for (int j = 0; j < NQ; ++j)
          acc[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][t]), _mm512_mul_ps(sc[j], dx), acc[j][t]);
      }
    } else if constexpr (kK) {
      Q4KGroupScales sc[NQ];
#pragma GCC unroll 2
      for (int j = 0; j < NQ; ++j) {
        if (g % 2 == 0)
          sb[j] = q4_k_super_block(q[j] + groups * (kQuant + kQuadBits<T>) + (g / 2) * kRowsX4KquantScaleBytes);
        sc[j] = q4_k_group_scales(sb[j], g % 2);
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t][g].dx));
        const __m512 xs = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t][g].xsum));
#pragma GCC unroll 2
        for (int j = 0; j < NQ; ++j) {
          acc[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][t]), _mm512_mul_ps(sc[j].scd, dx), acc[j][t]);
          acc[j][t] = _mm512_fnmadd_ps(sc[j].mnd, xs, acc[j][t]);
        }
      }
    } else {
      __m512 dw[NQ];
      [[maybe_unused]] __m512 mw[NQ];
#pragma GCC unroll 2
      for (int j = 0; j < NQ; ++j) {
        const uint8_t* s = q[j] + groups * (kQuant + kQuadBits<T>) + g * kQuadScales<T>;
        dw[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
        if constexpr (kMin) mw[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t][g].dx));
        [[maybe_unused]] __m512 xs;
        if constexpr (kMin) xs = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t][g].xsum));
#pragma GCC unroll 2
        for (int j = 0; j < NQ; ++j) {
          acc[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][t]), _mm512_mul_ps(dw[j], dx), acc[j][t]);
          if constexpr (kMin) acc[j][t] = _mm512_fmadd_ps(mw[j], xs, acc[j][t]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) store_rows(acc[j][t], out[j * NT + t]);
}

// tile8 for a run-time number of tokens, nt in [1, 5].
template <DType T, int NQ>
MOEFLOW_VNNI_ATTR inline void tile8_n(int nt, const uint8_t* const* q, int64_t groups, const PackedX8* const* x,
                                      float* const* out, const uint8_t* const* pf) {
  switch (nt) {
    case 1: tile8<T, NQ, 1>(q, groups, x, out, pf); break;
    case 2: tile8<T, NQ, 2>(q, groups, x, out, pf); break;
    case 3: tile8<T, NQ, 3>(q, groups, x, out, pf); break;
    case 4: tile8<T, NQ, 4>(q, groups, x, out, pf); break;
    default: tile8<T, NQ, 5>(q, groups, x, out, pf); break;
  }
}

// Tokens in the next int8 pass over a tile's quads when `left` remain: four, but five
// where four would leave one (5, 9, 13, ...): a pass of one token unpacks the quads'
// weights again for a quarter of the products, ~0.6 of a four-token pass, and a tile of
// five still fits the registers (10 integer and 10 float accumulators).
// Q6_K's tiles keep two integer accumulators per quad and token (its sub-blocks' halves
// are scaled apart), so at most three tokens a pass fit the registers.
constexpr int kMaxTokensPass8 = 5;
template <DType T>
inline int tokens_in_pass8(int left) {
  if (T == DType::Q6_K) return std::min(3, left);
  return left % 4 == 1 && left > 4 ? 5 : std::min(4, left);
}

// Where the int8 tiles prefetch: ~8 KiB on (at least two quads). Their quads take half
// the time of the int16 ones, so two quads of 768 columns on left the reads too little
// lead; but the prefetched lines go to L1 (non-temporal), and with the gate and up
// matrices streamed as a pair, 16 KiB on each (a third of a Zen 5 core's 48 KiB L1 per
// stream) was slower than 8 KiB at every batch of 4 to 16 sequences (docs/performance.md).
constexpr int64_t kInt8PrefetchBytes = 8192;
inline int64_t tokens_prefetch_quads(size_t qb) {
  return std::max<int64_t>(2, kInt8PrefetchBytes / static_cast<int64_t>(qb));
}

template <DType T>
MOEFLOW_VNNI_ATTR void quads8_tokens(const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* const* xs,
                                     int n_tok, float* const* outs, const uint8_t* pf_end) {
  constexpr int kTokens = kMaxTokensPass8;
  const int64_t groups = cols / kRowsX4GroupCols;
  const size_t qb = static_cast<size_t>(groups * kQuadStep<T>);
  // Pairs of quads (from the range's halves) where the arithmetic binds; one quad at a
  // time for a few tokens, where the memory stream does (one core streaming a 37 MB
  // matrix: q8_0 four tokens 26 -> 44 GB/s as single quads, sixteen 12 -> 9; q4_0 two
  // tokens 44 -> 48, four 36 -> 32).
  const QuadTiles tiles(n_quads, rows_x4_pair_pays(T, true, n_tok) ? QuadTiling::Halves : QuadTiling::One);
  const int64_t distance = tokens_prefetch_quads(qb);
  for (int64_t k = 0; k < tiles.count(); ++k) {
    int64_t at[2];
    const int nq = tiles.at(k, at);
    const uint8_t* q[2] = {W + static_cast<size_t>(at[0]) * qb, W + static_cast<size_t>(at[1]) * qb};
    for (int t0 = 0, nt = 0; t0 < n_tok; t0 += nt) {
      nt = tokens_in_pass8<T>(n_tok - t0);
      const PackedX8* x[kTokens];
      float* o[2 * kTokens];
      // The first pass over the quads prefetches as quads_tokens does; the others read
      // them from cache.
      const uint8_t* pf[2] = {t0 == 0 ? prefetch_of(W, at[0], qb, pf_end, distance) : nullptr,
                              t0 == 0 && nq == 2 ? prefetch_of(W, at[1], qb, pf_end, distance) : nullptr};
      for (int t = 0; t < nt; ++t) {
        x[t] = reinterpret_cast<const PackedX8*>(xs[t0 + t]);
        for (int j = 0; j < nq; ++j) o[j * nt + t] = outs[t0 + t] + 4 * at[j];
      }
      if (nq == 2) {
        tile8_n<T, 2>(nt, q, groups, x, o, pf);
      } else {
        tile8_n<T, 1>(nt, q, groups, x, o, pf);
      }
    }
  }
}

// Two matrices of one type and shape on the same tokens (rows_x4_quads_tokens_pair):
// quad i of each as one tile of two quads, so a core streams from two places at once
// and each broadcast of a token's activation feeds both. Tokens per pass as each
// matrix's own kernel takes them (tokens_in_pass16 / tokens_in_pass8).
template <DType T, bool kInt8>
MOEFLOW_VNNI_ATTR void quads_tokens_pair(const RowsX4TokensPair& m, int64_t n_quads, int64_t cols,
                                         const uint8_t* const* xs, int n_tok) {
  constexpr int kTokens = kInt8 ? kMaxTokensPass8 : 3;
  const int64_t groups = cols / kRowsX4GroupCols;
  const size_t qb = static_cast<size_t>(groups * kQuadStep<T>);
  const int64_t distance = kInt8 ? tokens_prefetch_quads(qb) : kRowsX4PrefetchQuads;
  for (int64_t i = 0; i < n_quads; ++i) {
    const uint8_t* q[2] = {m.W[0] + static_cast<size_t>(i) * qb, m.W[1] + static_cast<size_t>(i) * qb};
    for (int t0 = 0, nt = 0; t0 < n_tok; t0 += nt) {
      nt = kInt8 ? tokens_in_pass8<T>(n_tok - t0) : tokens_in_pass16<T>(n_tok - t0);
      // The first pass over the quads prefetches at the pace it reads; the others
      // read them from cache.
      const uint8_t* pf[2] = {t0 == 0 ? prefetch_of(m.W[0], i, qb, m.pf_end[0], distance) : nullptr,
                              t0 == 0 ? prefetch_of(m.W[1], i, qb, m.pf_end[1], distance) : nullptr};
      float* o[2 * kTokens];
      for (int j = 0; j < 2; ++j)
        for (int t = 0; t < nt; ++t) o[j * nt + t] = m.outs[j][t0 + t] + 4 * i;
      if constexpr (kInt8) {
        const PackedX8* x[kTokens];
        for (int t = 0; t < nt; ++t) x[t] = reinterpret_cast<const PackedX8*>(xs[t0 + t]);
        tile8_n<T, 2>(nt, q, groups, x, o, pf);
      } else {
        const PackedX4* x[kTokens];
        for (int t = 0; t < nt; ++t) x[t] = reinterpret_cast<const PackedX4*>(xs[t0 + t]);
        tile16_n<T, 2>(nt, q, groups, x, o, pf);
      }
    }
  }
}

// Several matrices' quads in turn, each on its own activation (rows_x4_quads8_multi):
// n memory streams per core, as quads_multi; two matrices on one activation (an
// expert's gate and up) as one tile, quad i of each.
template <DType T>
MOEFLOW_VNNI_ATTR void quads8_multi(const RowsX4Stream* s, int n, int64_t n_quads, int64_t cols) {
  const int64_t groups = cols / kRowsX4GroupCols;
  const size_t qb = static_cast<size_t>(groups * kQuadStep<T>);
  if (n == 2 && s[0].x == s[1].x) {
    const PackedX8* x[1] = {reinterpret_cast<const PackedX8*>(s[0].x)};
    for (int64_t i = 0; i < n_quads; ++i) {
      const uint8_t* q[2] = {s[0].W + static_cast<size_t>(i) * qb, s[1].W + static_cast<size_t>(i) * qb};
      const uint8_t* pf[2] = {prefetch_of(s[0].W, i, qb, s[0].pf_end), prefetch_of(s[1].W, i, qb, s[1].pf_end)};
      float* o[2] = {s[0].out + 4 * i, s[1].out + 4 * i};
      tile8<T, 2, 1>(q, groups, x, o, pf);
    }
    return;
  }
  for (int64_t i = 0; i < n_quads; ++i)
    for (int k = 0; k < n; ++k) {
      const PackedX8* x[1] = {reinterpret_cast<const PackedX8*>(s[k].x)};
      const uint8_t* q[1] = {s[k].W + static_cast<size_t>(i) * qb};
      const uint8_t* pf[1] = {prefetch_of(s[k].W, i, qb, s[k].pf_end)};
      float* o[1] = {s[k].out + 4 * i};
      tile8<T, 1, 1>(q, groups, x, o, pf);
    }
}

// Rows r of a quad's groups [g0, g0 + n_groups) as floats: d * q (q4_0: d * (nibble - 8),
// q5_0: d * (nibble + 16 * fifth bit - 16)), the products DequantSpan forms from GGUF's
// blocks, so prefill is unchanged.
MOEFLOW_VNNI_ATTR void dequant_avx512(DType t, const uint8_t* quad, int64_t cols, int64_t g0, int64_t n_groups,
                                      float* out, int64_t ld) {
  if (dtype_is_kquant(t)) {
    rows_x4_kquant_dequant(t, quad, cols, g0, n_groups, out, ld);
    return;
  }
  const bool q8 = t == DType::Q8_0, q5 = t == DType::Q5_0;
  const int64_t gq = q8 ? 512 : 256, gbits = rows_x4_group_bit_bytes(t);
  const int64_t groups = cols / kRowsX4GroupCols;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(quad + groups * (gq + gbits));
  alignas(64) uint8_t rows[2][4][64];  // [half][row]: block b's quant bytes 16h..16h+15 at 16b
  alignas(64) float d[16];
  const __m512i nibble = _mm512_set1_epi32(0x0f), offset = _mm512_set1_epi32(q5 ? 16 : 8);
  const __m512i k16 = _mm512_set1_epi32(16);
  for (int64_t g = g0; g < g0 + n_groups; ++g) {
    rows_of_steps(quad + g * gq, rows[0]);
    if (q8) rows_of_steps(quad + g * gq + 256, rows[1]);
    _mm512_store_ps(d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 16 * g))));
    for (int r = 0; r < 4; ++r) {
      float* o = out + r * ld + (g - g0) * kRowsX4GroupCols;
      for (int b = 0; b < 4; ++b) {
        const __m512 db = _mm512_set1_ps(d[4 * r + b]);
        if (q8) {
          for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rows[h][r] + 16 * b)));
            _mm512_storeu_ps(o + 32 * b + 16 * h, _mm512_mul_ps(db, _mm512_cvtepi32_ps(q)));
          }
        } else {
          const __m512i q = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rows[0][r] + 16 * b)));
          __m512i lo = _mm512_and_si512(q, nibble), hi = _mm512_srli_epi32(q, 4);
          if (q5) {
            const uint32_t bits = rows_x4_fifth_bits(quad + groups * gq + g * gbits, r, b);
            lo = _mm512_mask_add_epi32(lo, static_cast<__mmask16>(bits), lo, k16);
            hi = _mm512_mask_add_epi32(hi, static_cast<__mmask16>(bits >> 16), hi, k16);
          }
          lo = _mm512_sub_epi32(lo, offset);
          hi = _mm512_sub_epi32(hi, offset);
          _mm512_storeu_ps(o + 32 * b, _mm512_mul_ps(db, _mm512_cvtepi32_ps(lo)));
          _mm512_storeu_ps(o + 32 * b + 16, _mm512_mul_ps(db, _mm512_cvtepi32_ps(hi)));
        }
      }
    }
  }
}

MOEFLOW_VNNI_ATTR void repack_avx512(DType ft, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const bool q8 = ft == DType::Q8_0, min = rows_x4_has_min(ft);
  const int64_t gq = q8 ? 512 : 256, gbits = rows_x4_group_bit_bytes(ft), gscales = rows_x4_group_scale_bytes(ft);
  const int64_t block_bytes = static_cast<int64_t>(dtype_info(ft).type_size);
  // f16 d (and m), then q5_0's / q5_1's 4 bytes of qh, then the quants.
  const int64_t qs_at = block_bytes - (q8 ? 32 : 16), qh_at = qs_at - 4;
  const int64_t groups = cols / kRowsX4GroupCols, nb = cols / 32;
  const size_t rb = static_cast<size_t>(nb * block_bytes);
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    const uint8_t* in = src + static_cast<size_t>(4 * q) * rb;
    uint8_t* quad = dst + 4 * rb * static_cast<size_t>(q);
    if (gbits) std::memset(quad + groups * gq, 0, static_cast<size_t>(groups * gbits));
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* blocks[4];
      for (int r = 0; r < 4; ++r) blocks[r] = in + r * rb + static_cast<size_t>(4 * g * block_bytes);
      for (int h = 0; h < (q8 ? 2 : 1); ++h) {
        const uint8_t* quants[4];  // quant bytes 16h.. of each row's block 0
        for (int r = 0; r < 4; ++r) quants[r] = blocks[r] + qs_at + 16 * h;
        steps_of_rows(quants, block_bytes, quad + g * gq + 256 * h);
      }
      uint8_t* scales = quad + groups * (gq + gbits) + g * gscales;  // 16 d (then 16 m)
      for (int r = 0; r < 4; ++r)
        for (int b = 0; b < 4; ++b) {
          const uint8_t* block = blocks[r] + b * block_bytes;
          std::memcpy(scales + 2 * (4 * r + b), block, 2);
          if (min) std::memcpy(scales + 32 + 2 * (4 * r + b), block + 2, 2);
          if (gbits) {
            uint32_t qh;
            std::memcpy(&qh, block + qh_at, 4);
            rows_x4_put_fifth_bits(quad + groups * gq + g * gbits, r, b, qh);
          }
        }
    }
  }
}


}  // namespace

// Runs f(tag) with tag's ::value the type t if it is one of Ts; false if none.
template <DType... Ts, class F>
bool one_of(DType t, F&& f) {
  return ((t == Ts && (f(std::integral_constant<DType, Ts>{}), true)) || ...);
}

// Runs f(tag) with tag's ::value the interleaved type t (q4_0 or q8_0); else throws
// naming `what`.
template <class F>
void by_type(DType t, const char* what, F&& f) {
  if (!one_of<DType::Q4_0, DType::Q8_0>(t, f))
    throw std::invalid_argument(std::string("moeflow: ") + what + ": no interleaved layout for this type");
}

// by_type for the int8 kernels, which also take q4_1, q5_0, q5_1, the iq4s and the k-quants
// (the int16 ones do not: CpuBackend interleaves them only where they meet int8
// activations).
template <class F>
void by_type8(DType t, const char* what, F&& f) {
  if (!one_of<DType::Q4_0, DType::Q8_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS,
              DType::Q4_K, DType::Q5_K, DType::Q6_K>(t, f))
    throw std::invalid_argument(std::string("moeflow: ") + what + ": no interleaved layout for this type");
}

void rows_x4_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) { pack_x(qx, dx, cols, out); }

void rows_x4_quads(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* xp, float* out,
                   const uint8_t* pf_end) {
  const auto* x = reinterpret_cast<const PackedX4*>(xp);
  by_type(t, "rows_x4_quads", [&](auto T) { quads<decltype(T)::value>(W, n_quads, cols, x, out, pf_end); });
}

void rows_x4_quads_multi(DType t, const RowsX4Stream* s, int n, int64_t n_quads, int64_t cols) {
  by_type(t, "rows_x4_quads_multi", [&](auto T) { quads_multi<decltype(T)::value>(s, n, n_quads, cols); });
}

void rows_x4_quads_tokens(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* const* xs,
                          int n_tok, float* const* outs, const uint8_t* pf_end) {
  by_type(t, "rows_x4_quads_tokens",
          [&](auto T) { quads_tokens<decltype(T)::value>(W, n_quads, cols, xs, n_tok, outs, pf_end); });
}

void rows_x4_pack_x8(const float* x, int64_t cols, uint8_t* out) { pack_x8(x, cols, out); }

void rows_x4_quads8(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* xp, float* out,
                    const uint8_t* pf_end) {
  const RowsX4Stream s{W, xp, out, pf_end};
  rows_x4_quads8_multi(t, &s, 1, n_quads, cols);
}

void rows_x4_quads8_multi(DType t, const RowsX4Stream* s, int n, int64_t n_quads, int64_t cols) {
  by_type8(t, "rows_x4_quads8_multi", [&](auto T) { quads8_multi<decltype(T)::value>(s, n, n_quads, cols); });
}

void rows_x4_quads8_tokens(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* const* xs,
                           int n_tok, float* const* outs, const uint8_t* pf_end) {
  by_type8(t, "rows_x4_quads8_tokens",
          [&](auto T) { quads8_tokens<decltype(T)::value>(W, n_quads, cols, xs, n_tok, outs, pf_end); });
}
void rows_x4_quads_tokens_pair(DType t, bool x_int8, const RowsX4TokensPair& m, int64_t n_quads, int64_t cols,
                               const uint8_t* const* xs, int n_tok) {
  if (x_int8) {
    by_type8(t, "rows_x4_quads_tokens_pair",
             [&](auto T) { quads_tokens_pair<decltype(T)::value, true>(m, n_quads, cols, xs, n_tok); });
  } else {
    by_type(t, "rows_x4_quads_tokens_pair",
            [&](auto T) { quads_tokens_pair<decltype(T)::value, false>(m, n_quads, cols, xs, n_tok); });
  }
}

#else  // no such kernels here: q4_vnni_enabled() is false, so nothing is repacked

void rows_x4_pack_x(const int16_t*, const float*, int64_t, uint8_t*) {}
void rows_x4_quads(DType, const uint8_t*, int64_t, int64_t, const uint8_t*, float*, const uint8_t*) {
  throw std::logic_error("moeflow: rows_x4_quads without AVX-512 VNNI");
}
void rows_x4_quads_multi(DType, const RowsX4Stream*, int, int64_t, int64_t) {
  throw std::logic_error("moeflow: rows_x4_quads_multi without AVX-512 VNNI");
}
void rows_x4_quads_tokens(DType, const uint8_t*, int64_t, int64_t, const uint8_t* const*, int, float* const*,
                          const uint8_t*) {
  throw std::logic_error("moeflow: rows_x4_quads_tokens without AVX-512 VNNI");
}
void rows_x4_pack_x8(const float*, int64_t, uint8_t*) {}
void rows_x4_quads8(DType, const uint8_t*, int64_t, int64_t, const uint8_t*, float*, const uint8_t*) {
  throw std::logic_error("moeflow: rows_x4_quads8 without AVX-512 VNNI");
}
void rows_x4_quads8_multi(DType, const RowsX4Stream*, int, int64_t, int64_t) {
  throw std::logic_error("moeflow: rows_x4_quads8_multi without AVX-512 VNNI");
}
void rows_x4_quads8_tokens(DType, const uint8_t*, int64_t, int64_t, const uint8_t* const*, int, float* const*,
                           const uint8_t*) {
  throw std::logic_error("moeflow: rows_x4_quads8_tokens without AVX-512 VNNI");
}
void rows_x4_quads_tokens_pair(DType, bool, const RowsX4TokensPair&, int64_t, int64_t, const uint8_t* const*, int) {
  throw std::logic_error("moeflow: rows_x4_quads_tokens_pair without AVX-512 VNNI");
}

#endif

void rows_x4_x8_values(const float* x, int64_t cols, float* out) {
  int8_t q[32];
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float d = quantize_x8_block(x + 32 * b, q);
    for (int j = 0; j < 32; ++j) out[32 * b + j] = d * q[j];
  }
}

void rows_x4_repack(DType file_type, const void* src, int64_t rows, int64_t cols, void* dst) {
#ifdef MOEFLOW_HAVE_VNNI_KERNEL
  if (cpu_has_avx512_vnni() && rows_x4_fits(rows, cols) && rows_x4_supports(file_type) &&
      file_type != DType::IQ4_XS) {  // iq4_xs: the portable repack
    const auto* in = static_cast<const uint8_t*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    if (dtype_is_kquant(file_type)) rows_x4_kquant_repack(file_type, in, rows, cols, out);
    else repack_avx512(file_type, in, rows, cols, out);
    return;
  }
#endif
  repack_rows_x4(file_type, src, rows, cols, dst);  // also the error for a bad shape or type
}

void rows_x4_dequant_quad(DType t, const uint8_t* quad, int64_t cols, int64_t g0, int64_t n_groups, float* out,
                          int64_t ld) {
#ifdef MOEFLOW_HAVE_VNNI_KERNEL
  // dequant_avx512 takes q4_0, q5_0, q8_0 and the k-quants; the other interleaved types
  // take the portable path (dequantize_row's floats): the CPU backend runs interleaved
  // rows on the integer kernels, prefill's tokens too (integer_kernels_for), so only a
  // direct f32 matmul comes here.
  if (cpu_has_avx512_vnni() &&
      (t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q8_0 || dtype_is_kquant(t))) {
    dequant_avx512(t, quad, cols, g0, n_groups, out, ld);
    return;
  }
#endif
  // Tests build interleaved matrices on any CPU: the portable path, over whole file
  // blocks (Q4_K's span two groups).
  const int64_t block_cols = dtype_info(t).block_size, c0 = g0 * kRowsX4GroupCols, c1 = c0 + n_groups * kRowsX4GroupCols;
  const int64_t b0 = c0 / block_cols, b1 = (c1 + block_cols - 1) / block_cols;
  std::vector<uint8_t> blocks(row_bytes(t, (b1 - b0) * block_cols));
  std::vector<float> values(static_cast<size_t>((b1 - b0) * block_cols));
  for (int r = 0; r < kRowsX4; ++r) {
    rows_x4_row_blocks(t, quad, cols, r, b0, b1 - b0, blocks.data());
    dequantize_row(t, blocks.data(), values.data(), (b1 - b0) * block_cols);
    std::copy(values.begin() + (c0 - b0 * block_cols), values.begin() + (c1 - b0 * block_cols), out + r * ld);
  }
}

}  // namespace moeflow::cpu
