// Q4_K's (and Q5_K's) 12 packed scale bytes decoded with byte shuffles, for the AVX-512
// kernel files (which include vnni_target.h first): kquant_vnni.cpp decodes one row's,
// rows_x4_vnni.cpp four rows' at once, one per 128-bit lane (tensor/rows_x4.h keeps
// each row's 16 scale bytes in its own lane for that).
#pragma once
#include <cstdint>

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

}  // namespace moeflow::cpu
#endif
