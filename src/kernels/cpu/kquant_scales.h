// The k-quants' scales decoded with byte shuffles, for the AVX-512 kernel files (which
// include vnni_target.h first): Q4_K's (and Q5_K's) 12 packed scale bytes, one row's
// (kquant_vnni.cpp) or four rows' at once, one per 128-bit lane (rows_x4_vnni.cpp:
// tensor/rows_x4.h keeps each row's 16 scale bytes in its own lane for that); and the
// interleaved Q4_K / Q5_K / Q6_K quads' per-group scale vectors.
#pragma once
#include <cstdint>
#include <cstring>

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
namespace moeflow::cpu {

// Decoded: 8 scales (bytes 0-7) and 8 mins (bytes 8-15), as kq_scale_min_k4 reads them:
// sub-blocks 0-3 keep 6 bits in s[0..7]; 4-7 their low 4 in the nibbles of s[8..11]
// and their top 2 in the top bits of s[0..7].
struct Q4ScaleIndex {
  alignas(16) uint8_t low[16], high[16];
  constexpr Q4ScaleIndex() : low{}, high{} {
    for (int i = 0; i < 4; ++i) {
      low[i] = static_cast<uint8_t>(i);           // sc 0-3: s[i]
      low[4 + i] = static_cast<uint8_t>(8 + i);   // sc 4-7: s[8+i] (low nibble)
      low[8 + i] = static_cast<uint8_t>(4 + i);   // m 0-3: s[4+i]
      low[12 + i] = static_cast<uint8_t>(8 + i);  // m 4-7: s[8+i] (high nibble)
      high[i] = high[8 + i] = 0x80;               // none
      high[4 + i] = static_cast<uint8_t>(i);      // sc 4-7: top bits of s[i]
      high[12 + i] = static_cast<uint8_t>(4 + i); // m 4-7: top bits of s[4+i]
    }
  }
};
inline constexpr Q4ScaleIndex kQ4Scales;

// One row's: 16 bytes at scales12, the 12 scale bytes and 4 bytes that are not read.
MOEFLOW_VNNI_ATTR inline __m128i q4_k_scales_mins(const uint8_t* scales12, __m128i low_idx, __m128i high_idx) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales12));
  const __m128i a = _mm_shuffle_epi8(s, low_idx);
  // Bytes 12-15 take the high nibble: shifted copy blended in.
  const __m128i lo = _mm_and_si128(_mm_mask_blend_epi8(0xf000, a, _mm_srli_epi16(a, 4)),
                                   _mm_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(_mm_shuffle_epi8(s, high_idx), 2), _mm_set1_epi8(0x30));
  return _mm_or_si128(lo, hi);
}

// Four rows' at once: 128-bit lane r of s holds row r's 12 scale bytes (bytes 12-15
// are not read); lane r of the result its 8 scales and 8 mins.
MOEFLOW_VNNI_ATTR inline __m512i q4_k_scales_mins_x4(__m512i s) {
  const __m512i low_idx = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kQ4Scales.low)));
  const __m512i high_idx = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kQ4Scales.high)));
  const __m512i a = _mm512_shuffle_epi8(s, low_idx);
  const __m512i lo = _mm512_and_si512(_mm512_mask_blend_epi8(0xf000f000f000f000ull, a, _mm512_srli_epi16(a, 4)),
                                      _mm512_broadcast_i32x4(_mm_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f)));
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(_mm512_shuffle_epi8(s, high_idx), 2), _mm512_set1_epi8(0x30));
  return _mm512_or_si512(lo, hi);
}

// A Q4_K quad's scales (tensor/rows_x4.h), decoded once per super-block (sb_scales:
// its 64 scale bytes): lane r of sm holds row r's 8 scales and 8 mins; d and dmin hold
// row r's in lanes 4r..4r+3.
struct Q4KSuperBlock {
  __m512i sm;
  __m512 d, dmin;
};
MOEFLOW_VNNI_ATTR inline Q4KSuperBlock q4_k_super_block(const uint8_t* sb_scales) {
  const __m512i raw = _mm512_loadu_si512(sb_scales);
  // Word 8r + 6 (d) and 8r + 7 (dmin) of the raw bytes to halves 4r..4r+3.
  const __m512i d_idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 30, 30, 30, 30, 22, 22, 22,
                                         22, 14, 14, 14, 14, 6, 6, 6, 6);
  return {q4_k_scales_mins_x4(raw), _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(d_idx, raw))),
          _mm512_cvtph_ps(_mm512_castsi512_si256(
              _mm512_permutexvar_epi16(_mm512_add_epi16(d_idx, _mm512_set1_epi16(1)), raw)))};
}
// Group g's: lanes 4r + b hold row r's sub-block 4 (g % 2) + b, its scale times d (scd)
// and its min times dmin (mnd); both products are exact in f32 (6-bit integers times
// an f16), as in dequantize_row.
struct Q4KGroupScales {
  __m512 scd, mnd;
};
MOEFLOW_VNNI_ATTR inline Q4KGroupScales q4_k_group_scales(const Q4KSuperBlock& k, int64_t half) {
  // dword b of each 128-bit lane: byte 4h + b (a scale) or 8 + 4h + b (a min), zero-extended.
  const int h = static_cast<int>(4 * half);
  const __m512i sc_idx = _mm512_broadcast_i32x4(_mm_set_epi32(
      static_cast<int>(0x80808000u | (h + 3)), static_cast<int>(0x80808000u | (h + 2)),
      static_cast<int>(0x80808000u | (h + 1)), static_cast<int>(0x80808000u | h)));
  const __m512i m_idx = _mm512_add_epi32(sc_idx, _mm512_set1_epi32(8));
  return {_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_shuffle_epi8(k.sm, sc_idx)), k.d),
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_shuffle_epi8(k.sm, m_idx)), k.dmin)};
}

// A Q6_K quad's scales for group g (tensor/rows_x4.h): lanes 4r + b hold d times the
// scales of row r's 16-column sub-blocks 2(4h + b) (a) and 2(4h + b) + 1 (b), h = g % 2;
// exact in f32 (an int8 times an f16), as dequantize_row's first product.
// sb_scales: the super-block's 72 scale bytes.
struct Q6KGroupScales {
  __m512 a, b;
};
MOEFLOW_VNNI_ATTR inline Q6KGroupScales q6_k_group_scales(const uint8_t* sb_scales, int64_t half) {
  const __m512i raw = _mm512_loadu_si512(sb_scales);
  // dword b of lane r: scale byte 8h + 2b (+1) at the dword's top byte, then shifted
  // down arithmetically (sign-extended).
  const int h = static_cast<int>(8 * half);
  const __m512i a_idx = _mm512_broadcast_i32x4(
      _mm_set_epi32(static_cast<int>(static_cast<uint32_t>(h + 6) << 24 | 0x808080u),
                    static_cast<int>(static_cast<uint32_t>(h + 4) << 24 | 0x808080u),
                    static_cast<int>(static_cast<uint32_t>(h + 2) << 24 | 0x808080u),
                    static_cast<int>(static_cast<uint32_t>(h) << 24 | 0x808080u)));
  const __m512i b_idx = _mm512_add_epi32(a_idx, _mm512_set1_epi32(1 << 24));
  uint64_t d4;
  std::memcpy(&d4, sb_scales + 64, 8);
  const __m512 d = _mm512_permutexvar_ps(
      _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
      _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_cvtsi64_si128(static_cast<long long>(d4)))));
  return {_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_shuffle_epi8(raw, a_idx), 24))),
          _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_shuffle_epi8(raw, b_idx), 24)))};
}

}  // namespace moeflow::cpu
#endif
