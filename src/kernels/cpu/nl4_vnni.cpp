#include "kernels/cpu/vnni_target.h"  // first: see there

#include "kernels/cpu/nl4_vnni.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/quantize_x8.h"
#include "kernels/cpu/row_token_tiles.h"
#include "tensor/iquants.h"

namespace moeflow::cpu {

namespace {
// One pair of blocks of the packed activation.
struct alignas(64) PackedPair {
  int8_t q[64];
  int32_t sum[16];  // lane 0: block 0's sum, lane 8: block 1's, the rest 0
  float d[16];      // lanes 0-7: block 0's scale, 8-15: block 1's
};
static_assert(sizeof(PackedPair) == 192);
}  // namespace

bool nl4_vnni_type(DType t) {
  return (t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::MXFP4 || dtype_is_legacy_quant(t)) &&
         q4_vnni_enabled();
}

size_t nl4_x8_bytes(int64_t cols) { return static_cast<size_t>((cols / 32 + 1) / 2) * sizeof(PackedPair); }

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
namespace {

MOEFLOW_VNNI_ATTR void pack_pairs(const float* x, int64_t cols, uint8_t* out) {
  auto* pairs = reinterpret_cast<PackedPair*>(out);
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; b += 2) {
    PackedPair& p = pairs[b / 2];
    std::memset(&p, 0, sizeof p);
    for (int64_t k = 0; k < 2 && b + k < nb; ++k) {
      const X8BlockAvx512 q = quantize_x8_block_avx512(x + 32 * (b + k));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p.q + 32 * k), _mm512_cvtsepi32_epi8(q.q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p.q + 32 * k + 16), _mm512_cvtsepi32_epi8(q.q1));
      p.sum[8 * k] = _mm512_reduce_add_epi32(_mm512_add_epi32(q.q0, q.q1));
      for (int i = 0; i < 8; ++i) p.d[8 * k + i] = q.d;
    }
  }
}

// 2^(e - 128) for every exponent byte e (mxfp4_scale).
struct Mxfp4Scales {
  float f[256];
  Mxfp4Scales() {
    for (int e = 0; e < 256; ++e) f[e] = mxfp4_scale(static_cast<uint8_t>(e));
  }
};
const Mxfp4Scales kMxfp4Scales;

// These kernels also convert IQ4_NL's f16 scales (F16C, which every AVX-512 CPU has).
#define MOEFLOW_NL4_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,f16c")))

// Q4_1, Q5_0, Q5_1: the quant is the weight's level itself (no table), the 5-bit types
// add a fifth bit from qh, and Q4_1 / Q5_1 a block minimum m, whose share of the product
// is m * sum(x): dx * (the activation block's integer sum), the packed sum the offset
// uses (tensor/legacy_quants.h has the layouts).
template <DType T> constexpr bool kLinear = dtype_is_legacy_quant(T);
template <DType T> constexpr bool kFiveBit = T == DType::Q5_0 || T == DType::Q5_1;
template <DType T> constexpr bool kHasMin = T == DType::Q4_1 || T == DType::Q5_1;
template <DType T> constexpr int64_t kBlockBytes = T == DType::MXFP4 ? 17 : T == DType::Q4_1 ? 20 : T == DType::Q5_0 ? 22
                                                 : T == DType::Q5_1 ? 24 : 18;
// Where a block's qh (the 5-bit types) and its quant bytes start.
template <DType T> constexpr int64_t kHighAt = T == DType::Q5_1 ? 4 : 2;
template <DType T> constexpr int64_t kQuantsAt = T == DType::MXFP4 ? 1 : kBlockBytes<T> - 16;

// Where block k (32 columns) of a row keeps its 16 quant bytes.
// IQ4_NL: d (f16), qs; MXFP4: e, qs; IQ4_XS: super-blocks of 8 blocks, 136 bytes: d,
// the 6-bit block scales' high bits (2 each) and low nibbles, then the blocks' qs; the
// legacy types: their scales (and qh) first, qs last.
template <DType T>
inline const uint8_t* block_quants(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::IQ4_XS) return row + (k / 8) * 136 + 8 + 16 * (k % 8);
  else return row + k * kBlockBytes<T> + kQuantsAt<T>;
}
// The f16 d at byte 0 of blocks k and k1 and the f16 after it (Q4_1's and Q5_1's m) in
// one conversion, as vectors: lanes 0-7 block k's, 8-15 block k1's (a scalar conversion
// and broadcast per value had cost the legacy types a fifth of their speed).
template <DType T>
MOEFLOW_NL4_ATTR inline void pair_halves(const uint8_t* row, int64_t k, int64_t k1, __m512& d, __m512* m) {
  uint32_t a, b;
  std::memcpy(&a, row + k * kBlockBytes<T>, 4);
  std::memcpy(&b, row + k1 * kBlockBytes<T>, 4);
  const __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(a | uint64_t{b} << 32))));
  d = _mm512_permutexvar_ps(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0), f);  // d0 m0 d1 m1
  if (m) *m = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1), f);
}
// The scales of blocks k and k1 (k1 = k + 1, or k for an odd last block) as a vector:
// lanes 0-7 block k's, 8-15 block k1's. All but IQ4_XS (RowScales).
template <DType T>
MOEFLOW_NL4_ATTR inline __m512 pair_scales(const uint8_t* row, int64_t k, int64_t k1) {
  static_assert(T != DType::IQ4_XS);
  if constexpr (T == DType::MXFP4) {
    const float s0 = kMxfp4Scales.f[row[k * 17]];  // a load where the exponent arithmetic branched
    const float s1 = kMxfp4Scales.f[row[k1 * 17]];
    return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
  } else {
    __m512 d;
    pair_halves<T>(row, k, k1, d, nullptr);
    return d;
  }
}

// Prefetches the next rows (R rows of `bytes` in all, at pf) at the kernels' pace: at the
// pair of blocks b of nb, that pair's share of them.
MOEFLOW_NL4_ATTR inline void prefetch_pair_share(const uint8_t* pf, size_t bytes, int64_t b, int64_t nb) {
  const size_t at = bytes * static_cast<size_t>(b) / static_cast<size_t>(nb);
  prefetch_lines_nta(pf + at, static_cast<int64_t>(2 * bytes / static_cast<size_t>(nb)) + 1, b == 0);
}

// A row's levels plus an offset that makes them unsigned (127 for IQ4's, 12 for
// MXFP4's, Q5_0's 16 already in its quants, none for Q4_1 / Q5_1), 64 bytes for blocks
// b and b1 (b1 = b + 1, or b for an odd last block).
template <DType T>
struct Levels {
  static constexpr int kOffset = T == DType::MXFP4 ? 12 : T == DType::Q5_0 ? 16 : kLinear<T> ? 0 : 127;
  __m512i table, nibble, spread;
  MOEFLOW_NL4_ATTR Levels() {
    const int8_t* levels = T == DType::MXFP4 ? kMxfp4Levels : kIq4Levels;
    alignas(16) uint8_t lut[16];
    for (int i = 0; i < 16; ++i) lut[i] = static_cast<uint8_t>(levels[i] + kOffset);
    table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(lut)));
    nibble = _mm512_set1_epi8(0x0f);
    // lanes [q0, q0 >> 4, q1, q1 >> 4] of two blocks' 16 quant bytes: elements 0-15,
    // 16-31 of block 0, then of block 1 (GGUF's nibble order).
    spread = _mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0);
  }
  MOEFLOW_NL4_ATTR __m512i of(const uint8_t* row, int64_t b, int64_t b1) const {
    const __m256i q = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block_quants<T>(row, b)))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block_quants<T>(row, b1))), 1);
    __m512i v = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(q));
    v = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), nibble);  // lanes 1 and 3
    if constexpr (kFiveBit<T>) {
      // Byte i of v is weight i of the pair (0-31 block b, 32-63 block b1), and so is bit
      // i of the two blocks' qh words side by side.
      uint32_t h0, h1;
      std::memcpy(&h0, row + b * kBlockBytes<T> + kHighAt<T>, 4);
      std::memcpy(&h1, row + b1 * kBlockBytes<T> + kHighAt<T>, 4);
      return _mm512_or_si512(v, _mm512_maskz_mov_epi8(h0 | static_cast<uint64_t>(h1) << 32, _mm512_set1_epi8(0x10)));
    } else if constexpr (kLinear<T>) {
      return v;
    } else {
      return _mm512_shuffle_epi8(table, v);
    }
  }
};

// The pair scales of R rows. IQ4_XS decodes a super-block's eight block scales,
// d * (6-bit scale - 32) as dequantize_iq4_xs's dl, in one vector when a row enters it
// (a scalar decode per pair of blocks had cost 35% of the kernel's speed); the other
// types read theirs per pair (pair_scales). Pairs never straddle IQ4_XS's super-blocks
// (8 blocks).
template <DType T, int R>
struct RowScales {
  alignas(32) float xs[T == DType::IQ4_XS ? R : 1][8];
  // Before pair b of rows (b even): the new super-block's scales where b starts one.
  MOEFLOW_NL4_ATTR void enter(const uint8_t* const* rows, int64_t b) {
    if constexpr (T == DType::IQ4_XS) {
      if (b % 8 != 0) return;
      // Block j: low nibble of byte 4 + j / 2 (high for odd j), 2 bits at 2j of the
      // 16-bit scales_h.
      const __m256i lo_shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
      const __m256i hi_shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
      for (int r = 0; r < R; ++r) {
        const uint8_t* sb = rows[r] + (b / 8) * 136;
        uint16_t h, scales_h;
        uint32_t lows;
        std::memcpy(&h, sb, 2);
        std::memcpy(&scales_h, sb + 2, 2);
        std::memcpy(&lows, sb + 4, 4);
        const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(lows)), lo_shift),
                                            _mm256_set1_epi32(0x0f));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(scales_h), hi_shift), _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        _mm256_store_ps(xs[r], _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_cvtepi32_ps(ls)));
      }
    } else {
      (void)rows;
      (void)b;
    }
  }
  MOEFLOW_NL4_ATTR __m512 pair(int r, const uint8_t* row, int64_t b, int64_t b1) const {
    if constexpr (T == DType::IQ4_XS) {
      return _mm512_insertf32x8(_mm512_set1_ps(xs[r][b % 8]), _mm256_set1_ps(xs[r][b1 % 8]), 1);
    } else {
      (void)r;
      return pair_scales<T>(row, b, b1);
    }
  }
};

template <DType T, int R>
MOEFLOW_NL4_ATTR void rows_kernel(const uint8_t* const* rows, int64_t cols, const uint8_t* packed, float* out,
                                   const uint8_t* pf) {
  const size_t row_bytes_ = static_cast<size_t>(cols / dtype_info(T).block_size * dtype_info(T).type_size);
  const Levels<T> lv;
  RowScales<T, R> sc;
  const __m512i neg_offset = _mm512_set1_epi32(-Levels<T>::kOffset);
  const auto* x = reinterpret_cast<const PackedPair*>(packed);
  const int64_t nb = cols / 32;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    const PackedPair& p = x[b / 2];
    const __m512i xv = _mm512_load_si512(p.q);
    const __m512i init = _mm512_mullo_epi32(_mm512_load_si512(p.sum), neg_offset);
    const __m512 dx = _mm512_load_ps(p.d);
    const __m512 xsum = kHasMin<T> ? _mm512_cvtepi32_ps(_mm512_load_si512(p.sum)) : _mm512_setzero_ps();
    const bool two = b + 1 < nb;
    if (pf) prefetch_pair_share(pf, R * row_bytes_, b, nb);
    const int64_t b1 = two ? b + 1 : b;  // an odd last block: its pair is zeros
    sc.enter(rows, b);
    for (int r = 0; r < R; ++r) {
      const __m512i w = lv.of(rows[r], b, b1);
      const __m512i dot = _mm512_dpbusd_epi32(init, w, xv);
      __m512 dw, mw;
      if constexpr (kHasMin<T>) pair_halves<T>(rows[r], b, b1, dw, &mw);
      else dw = sc.pair(r, rows[r], b, b1);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx), acc[r]);
      if constexpr (kHasMin<T>) acc[r] = _mm512_fmadd_ps(xsum, _mm512_mul_ps(mw, dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// R rows against NT tokens' packed activations (x[t]), out[t][r]: rows_kernel with
// each row's pair of blocks turned into levels and its two scales read once for all NT
// tokens; a token's arithmetic is rows_kernel's step for step, so it gets the floats
// it gets alone. (rows_kernel is this at NT = 1 but kept apart: as a call of this
// one, one-token decode of MXFP4 ran ~7% slower.)
template <DType T, int R, int NT>
MOEFLOW_NL4_ATTR void rows_kernel_tokens(const uint8_t* const* rows, int64_t cols, const PackedPair* const* x,
                                   float* const* out, const uint8_t* pf) {
  const size_t row_bytes_ = static_cast<size_t>(cols / dtype_info(T).block_size * dtype_info(T).type_size);
  const Levels<T> lv;
  RowScales<T, R> sc;
  const __m512i neg_offset = _mm512_set1_epi32(-Levels<T>::kOffset);
  const int64_t nb = cols / 32;
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    __m512i xv[NT], init[NT];
    __m512 dx[NT], xsum[NT];
    for (int t = 0; t < NT; ++t) {
      const PackedPair& p = x[t][b / 2];
      xv[t] = _mm512_load_si512(p.q);
      init[t] = _mm512_mullo_epi32(_mm512_load_si512(p.sum), neg_offset);
      dx[t] = _mm512_load_ps(p.d);
      xsum[t] = kHasMin<T> ? _mm512_cvtepi32_ps(_mm512_load_si512(p.sum)) : _mm512_setzero_ps();
    }
    const bool two = b + 1 < nb;
    if (pf) prefetch_pair_share(pf, R * row_bytes_, b, nb);
    const int64_t b1 = two ? b + 1 : b;  // an odd last block: its pair is zeros
    sc.enter(rows, b);
    for (int r = 0; r < R; ++r) {
      const __m512i w = lv.of(rows[r], b, b1);
      __m512 dw, mw = _mm512_setzero_ps();
      if constexpr (kHasMin<T>) pair_halves<T>(rows[r], b, b1, dw, &mw);
      else dw = sc.pair(r, rows[r], b, b1);
      for (int t = 0; t < NT; ++t) {
        const __m512i dot = _mm512_dpbusd_epi32(init[t], w, xv[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
        if constexpr (kHasMin<T>) acc[r][t] = _mm512_fmadd_ps(xsum[t], _mm512_mul_ps(mw, dx[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) out[t][r] = _mm512_reduce_add_ps(acc[r][t]);
}

// Rows [r0, r1) in tiles of four rows by up to four tokens (for_row_token_tiles).
template <DType T>
MOEFLOW_NL4_ATTR void rows_tokens(const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t cols,
                                   const PackedPair* const* x, int n_tok, float* const* outs, const uint8_t* pf_end) {
  for_row_token_tiles(W, rb, r0, r1, n_tok, outs, pf_end,
                      [&](const uint8_t* const* rows, int nr, int t0, int nt, float* const* o, const uint8_t* pf) {
                        auto run = [&](auto rows_const) {
                          constexpr int NR = decltype(rows_const)::value;
                          switch (nt) {
                            case 1: rows_kernel_tokens<T, NR, 1>(rows, cols, x + t0, o, pf); break;
                            case 2: rows_kernel_tokens<T, NR, 2>(rows, cols, x + t0, o, pf); break;
                            case 3: rows_kernel_tokens<T, NR, 3>(rows, cols, x + t0, o, pf); break;
                            default: rows_kernel_tokens<T, NR, 4>(rows, cols, x + t0, o, pf); break;
                          }
                        };
                        if (nr == kTileRows) run(std::integral_constant<int, kTileRows>{});
                        else run(std::integral_constant<int, 1>{});
                      });
}

template <DType T>
MOEFLOW_NL4_ATTR void rows_of(const uint8_t* const* rows, int R, int64_t cols, const uint8_t* packed, float* out,
                               const uint8_t* pf) {
  switch (R) {
    case 1: return rows_kernel<T, 1>(rows, cols, packed, out, pf);
    case 2: return rows_kernel<T, 2>(rows, cols, packed, out, pf);
    case 3: return rows_kernel<T, 3>(rows, cols, packed, out, pf);
    case 4: return rows_kernel<T, 4>(rows, cols, packed, out, pf);
  }
  throw std::invalid_argument("moeflow: nl4_vnni_rows of " + std::to_string(R) + " rows (1 to 4)");
}

}  // namespace

void nl4_pack_x8(const float* x, int64_t cols, uint8_t* out) { pack_pairs(x, cols, out); }

void nl4_vnni_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const uint8_t* packed, float* out,
                   const uint8_t* pf) {
  if (t == DType::MXFP4) return rows_of<DType::MXFP4>(rows, R, cols, packed, out, pf);
  if (t == DType::IQ4_NL) return rows_of<DType::IQ4_NL>(rows, R, cols, packed, out, pf);
  if (t == DType::IQ4_XS) return rows_of<DType::IQ4_XS>(rows, R, cols, packed, out, pf);
  if (t == DType::Q4_1) return rows_of<DType::Q4_1>(rows, R, cols, packed, out, pf);
  if (t == DType::Q5_0) return rows_of<DType::Q5_0>(rows, R, cols, packed, out, pf);
  if (t == DType::Q5_1) return rows_of<DType::Q5_1>(rows, R, cols, packed, out, pf);
  throw std::invalid_argument(std::string("moeflow: nl4_vnni_rows of ") + dtype_name(t));
}

void nl4_vnni_rows_tokens(DType t, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t cols,
                          const uint8_t* const* packed, int n_tok, float* const* outs, const uint8_t* pf_end) {
  constexpr int kMaxTokens = 64;
  if (n_tok > kMaxTokens) {
    for (int t0 = 0; t0 < n_tok; t0 += kMaxTokens)
      nl4_vnni_rows_tokens(t, W, rb, r0, r1, cols, packed + t0, std::min(kMaxTokens, n_tok - t0), outs + t0, pf_end);
    return;
  }
  const PackedPair* x[kMaxTokens];
  for (int i = 0; i < n_tok; ++i) x[i] = reinterpret_cast<const PackedPair*>(packed[i]);
  if (t == DType::MXFP4) return rows_tokens<DType::MXFP4>(W, rb, r0, r1, cols, x, n_tok, outs, pf_end);
  if (t == DType::IQ4_NL) return rows_tokens<DType::IQ4_NL>(W, rb, r0, r1, cols, x, n_tok, outs, pf_end);
  if (t == DType::IQ4_XS) return rows_tokens<DType::IQ4_XS>(W, rb, r0, r1, cols, x, n_tok, outs, pf_end);
  if (t == DType::Q4_1) return rows_tokens<DType::Q4_1>(W, rb, r0, r1, cols, x, n_tok, outs, pf_end);
  if (t == DType::Q5_0) return rows_tokens<DType::Q5_0>(W, rb, r0, r1, cols, x, n_tok, outs, pf_end);
  if (t == DType::Q5_1) return rows_tokens<DType::Q5_1>(W, rb, r0, r1, cols, x, n_tok, outs, pf_end);
  throw std::invalid_argument(std::string("moeflow: nl4_vnni_rows_tokens of ") + dtype_name(t));
}
#else
void nl4_pack_x8(const float*, int64_t, uint8_t*) {
  throw std::logic_error("moeflow: nl4_pack_x8 without AVX-512 VNNI");
}
void nl4_vnni_rows(DType, const uint8_t* const*, int, int64_t, const uint8_t*, float*, const uint8_t*) {
  throw std::logic_error("moeflow: nl4_vnni_rows without AVX-512 VNNI");
}
void nl4_vnni_rows_tokens(DType, const uint8_t*, size_t, int64_t, int64_t, int64_t, const uint8_t* const*, int,
                          float* const*, const uint8_t*) {
  throw std::logic_error("moeflow: nl4_vnni_rows_tokens without AVX-512 VNNI");
}
#endif

}  // namespace moeflow::cpu
