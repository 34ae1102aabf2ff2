// The 4 x 4 transposes between a quad's step vectors and its rows' blocks (the
// interleaved layout, tensor/rows_x4.h), for the AVX-512 files that repack and
// dequantise it (include vnni_target.h first).
#pragma once
#include <cstdint>

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
namespace moeflow::cpu {

// Four quant vectors (steps k0..k0+3) of a group to each row's 64 bytes: [b][16 bytes].
MOEFLOW_VNNI_ATTR inline void rows_of_steps(const uint8_t* q, uint8_t (*rows)[64]) {
  // Within a row's gathered vector, dword 4k+b (128-bit lane k) goes to 4b+k.
  const __m512i transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i v0 = _mm512_loadu_si512(q), v1 = _mm512_loadu_si512(q + 64);
  const __m512i v2 = _mm512_loadu_si512(q + 128), v3 = _mm512_loadu_si512(q + 192);
  // 128-bit lane r of vector k (row r's step k) to lane k of row r's vector.
  const __m512i t0 = _mm512_shuffle_i32x4(v0, v1, 0x44), t1 = _mm512_shuffle_i32x4(v0, v1, 0xee);
  const __m512i t2 = _mm512_shuffle_i32x4(v2, v3, 0x44), t3 = _mm512_shuffle_i32x4(v2, v3, 0xee);
  _mm512_store_si512(rows[0], _mm512_permutexvar_epi32(transpose, _mm512_shuffle_i32x4(t0, t2, 0x88)));
  _mm512_store_si512(rows[1], _mm512_permutexvar_epi32(transpose, _mm512_shuffle_i32x4(t0, t2, 0xdd)));
  _mm512_store_si512(rows[2], _mm512_permutexvar_epi32(transpose, _mm512_shuffle_i32x4(t1, t3, 0x88)));
  _mm512_store_si512(rows[3], _mm512_permutexvar_epi32(transpose, _mm512_shuffle_i32x4(t1, t3, 0xdd)));
}

// The inverse of rows_of_steps: each row's 64 bytes ([b][16 bytes], 16 bytes at
// blocks[r] + block_bytes * b) to the four step vectors.
MOEFLOW_VNNI_ATTR inline void steps_of_rows(const uint8_t* const* blocks, int64_t block_bytes, uint8_t* q) {
  // Within a row's vector, dword 4b+k goes to 4k+b (128-bit lane k: the row's step k).
  const __m512i transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  __m512i r[4];
  for (int i = 0; i < 4; ++i) {
    const uint8_t* b = blocks[i];
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + block_bytes)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * block_bytes)), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 3 * block_bytes)), 3);
    r[i] = _mm512_permutexvar_epi32(transpose, v);
  }
  // Lane k of row r's vector to lane r of step k's vector (a 4 x 4 transpose of lanes).
  const __m512i t0 = _mm512_shuffle_i32x4(r[0], r[1], 0x44), t1 = _mm512_shuffle_i32x4(r[0], r[1], 0xee);
  const __m512i t2 = _mm512_shuffle_i32x4(r[2], r[3], 0x44), t3 = _mm512_shuffle_i32x4(r[2], r[3], 0xee);
  _mm512_storeu_si512(q, _mm512_shuffle_i32x4(t0, t2, 0x88));
  _mm512_storeu_si512(q + 64, _mm512_shuffle_i32x4(t0, t2, 0xdd));
  _mm512_storeu_si512(q + 128, _mm512_shuffle_i32x4(t1, t3, 0x88));
  _mm512_storeu_si512(q + 192, _mm512_shuffle_i32x4(t1, t3, 0xdd));
}

}  // namespace moeflow::cpu
#endif
