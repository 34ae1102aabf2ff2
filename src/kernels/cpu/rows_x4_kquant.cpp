// The interleaved k-quants' AVX-512 repacks and dequantisations (rows_x4_kquant.h);
// vnni_target.h says how the file builds.
#include "kernels/cpu/vnni_target.h"  // first: its pragmas must precede immintrin.h
#include "kernels/cpu/rows_x4_kquant.h"

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kernels/cpu/rows_x4_steps.h"
#include "tensor/kquants.h"
#include "tensor/rows_x4.h"

namespace moeflow::cpu {

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
namespace {

// A Q4_K (Q5_K) quad's groups [g0, g0 + n_groups) as floats, row r at out + r * ld:
// (d * scale) * q - dmin * min per sub-block, the products and the subtraction
// dequantize_row forms (no contraction into one rounding), so prefill is unchanged.
template <bool Q5>
__attribute__((optimize("fp-contract=off"))) MOEFLOW_VNNI_ATTR void dequant_kq_quad(const uint8_t* quad, int64_t cols,
                                                                                    int64_t g0, int64_t n_groups,
                                                                                    float* out, int64_t ld) {
  const int64_t groups = cols / kRowsX4GroupCols, bit_bytes = Q5 ? 64 : 0;
  alignas(64) uint8_t rows[4][64];  // [row]: sub-block b's 16 paired bytes at 16b
  const __m512i nibble = _mm512_set1_epi32(0x0f);
  for (int64_t g = g0; g < g0 + n_groups; ++g) {
    rows_of_steps(quad + g * 256, rows);
    const uint8_t* scales = quad + groups * (256 + bit_bytes) + (g / 2) * kRowsX4KquantScaleBytes;
    uint64_t masks[8] = {};  // Q5_K: the group's fifth-bit masks (tensor/rows_x4.h)
    if (Q5) std::memcpy(masks, quad + groups * 256 + g * 64, 64);
    for (int r = 0; r < 4; ++r) {
      const uint8_t* s = scales + 16 * r;
      uint16_t dh, mh;
      std::memcpy(&dh, s + 12, 2);
      std::memcpy(&mh, s + 14, 2);
      const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
      float* o = out + r * ld + (g - g0) * kRowsX4GroupCols;
      for (int b = 0; b < 4; ++b) {
        int sc, m;
        kq_scale_min_k4(s, static_cast<int>(4 * (g % 2) + b), sc, m);
        const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc)), m1 = _mm512_set1_ps(dmin * static_cast<float>(m));
        const __m512i q = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rows[r] + 16 * b)));
        __m512i lo = _mm512_and_si512(q, nibble), hi = _mm512_srli_epi32(q, 4);
        if (Q5) {  // elements 4s..4s+3 (lo) and 16+4s.. (hi) from masks 2s and 2s+1
          __mmask16 blo = 0, bhi = 0;
          for (int k = 0; k < 4; ++k) {
            blo = static_cast<__mmask16>(blo | ((masks[2 * k] >> (4 * (4 * r + b))) & 0xf) << (4 * k));
            bhi = static_cast<__mmask16>(bhi | ((masks[2 * k + 1] >> (4 * (4 * r + b))) & 0xf) << (4 * k));
          }
          lo = _mm512_mask_add_epi32(lo, blo, lo, _mm512_set1_epi32(16));
          hi = _mm512_mask_add_epi32(hi, bhi, hi, _mm512_set1_epi32(16));
        }
        _mm512_storeu_ps(o + 32 * b, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(lo)), m1));
        _mm512_storeu_ps(o + 32 * b + 16, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(hi)), m1));
      }
    }
  }
}

// A Q6_K quad's groups [g0, g0 + n_groups) as floats, row r at out + r * ld: (d *
// scale) * (q - 32) per 16-column sub-block, dequantize_row's products in its order.
MOEFLOW_VNNI_ATTR void dequant_q6_k_quad(const uint8_t* quad, int64_t cols, int64_t g0, int64_t n_groups, float* out,
                                         int64_t ld) {
  const int64_t groups = cols / kRowsX4GroupCols;
  alignas(64) uint8_t rows[4][64];  // [row]: block b's 16 paired bytes at 16b
  const __m512i two = _mm512_set1_epi8(3), nib = _mm512_set1_epi8(0x0f), k32 = _mm512_set1_epi32(32);
  // 128-bit lane b of the gathered top bits: dwords (vector 0, vector 1, vector 0,
  // vector 1) of block b, so byte 4s + t holds step s's byte for element t.
  const __m512i gather = _mm512_set_epi32(19, 3, 19, 3, 18, 2, 18, 2, 17, 1, 17, 1, 16, 0, 16, 0);
  constexpr __mmask64 kSteps23 = 0xff00ff00ff00ff00ull;  // bytes 8-15 of each lane
  for (int64_t g = g0; g < g0 + n_groups; ++g) {
    rows_of_steps(quad + g * 256, rows);
    const uint8_t* tops = quad + groups * 256 + g * 128;
    const uint8_t* scales = quad + groups * (256 + 128) + (g / 2) * kRowsX4Q6KScaleBytes;
    for (int r = 0; r < 4; ++r) {
      uint16_t dh;
      std::memcpy(&dh, scales + 64 + 2 * r, 2);
      const float d = fp16_to_fp32(dh);
      const __m512i w = _mm512_permutex2var_epi32(
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tops + 16 * r))), gather,
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tops + 64 + 16 * r))));
      // Steps 0-1 keep their top bits at 4 (first half) and 6, steps 2-3 at 0 and 2.
      const __m512i top0 =
          _mm512_mask_blend_epi8(kSteps23, _mm512_and_si512(_mm512_srli_epi16(w, 4), two), _mm512_and_si512(w, two));
      const __m512i top1 = _mm512_mask_blend_epi8(kSteps23, _mm512_and_si512(_mm512_srli_epi16(w, 6), two),
                                                  _mm512_and_si512(_mm512_srli_epi16(w, 2), two));
      const __m512i p = _mm512_load_si512(rows[r]);
      alignas(64) uint8_t q[2][64];  // [half][16b + i]: element 16 half + i of block b, 0..63
      _mm512_store_si512(q[0], _mm512_or_si512(_mm512_and_si512(p, nib), _mm512_slli_epi16(top0, 4)));
      _mm512_store_si512(q[1],
                         _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(p, 4), nib), _mm512_slli_epi16(top1, 4)));
      float* o = out + r * ld + (g - g0) * kRowsX4GroupCols;
      for (int b = 0; b < 4; ++b) {
        const int j = 2 * static_cast<int>(4 * (g % 2) + b);  // its first 16-column sub-block in the super-block
        for (int h = 0; h < 2; ++h) {
          const float dj = d * static_cast<float>(static_cast<int8_t>(scales[16 * r + j + h]));
          const __m128i bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(q[h] + 16 * b));
          const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(bytes), k32);
          _mm512_storeu_ps(o + 32 * b + 16 * h, _mm512_mul_ps(_mm512_set1_ps(dj), _mm512_cvtepi32_ps(v)));
        }
      }
    }
  }
}

// Q4_K (Q5_K) rows to the layout (tensor/rows_x4.h, repack_rows_x4 the reference): a
// super-block's nibble pairs (sub-blocks 2p and 2p+1 share qs[32p..32p+31], low and
// high) re-paired as q4_0's (byte i: elements i and 16+i of one sub-block), then placed
// as q4_0's blocks are; Q5_K's fifth bits (bit j of qh[e]: element e of sub-block j)
// gathered per sub-block by a byte movemask and dealt into the group's masks.
template <class Block>
MOEFLOW_VNNI_ATTR void repack_kq_avx512(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  const int64_t groups = cols / kRowsX4GroupCols, n_sb = cols / 256, bit_bytes = kQ5 ? 64 : 0;
  const size_t rb = static_cast<size_t>(n_sb) * sizeof(Block);
  const __m128i low = _mm_set1_epi8(0x0f), high = _mm_set1_epi8(static_cast<char>(0xf0));
  alignas(64) uint8_t paired[4][8][16];  // [row][sub-block]: q4_0's 16 bytes
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    const uint8_t* in = src + static_cast<size_t>(4 * q) * rb;
    uint8_t* quad = dst + 4 * rb * static_cast<size_t>(q);
    for (int64_t sb = 0; sb < n_sb; ++sb) {
      uint64_t masks[2][8] = {};  // [half of the super-block][mask]
      for (int r = 0; r < 4; ++r) {
        const auto& b = reinterpret_cast<const Block*>(in + r * rb)[sb];
        for (int p = 0; p < 4; ++p) {
          const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 32 * p));
          const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 32 * p + 16));
          _mm_store_si128(reinterpret_cast<__m128i*>(paired[r][2 * p]),
                          _mm_or_si128(_mm_and_si128(a0, low), _mm_slli_epi16(_mm_and_si128(a1, low), 4)));
          _mm_store_si128(reinterpret_cast<__m128i*>(paired[r][2 * p + 1]),
                          _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a0, 4), low), _mm_and_si128(a1, high)));
        }
        if constexpr (kQ5) {
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
          for (int j = 0; j < 8; ++j) {
            // Bit e: element e's fifth bit (bit j of qh[e], shifted to each byte's top).
            const auto w = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(qh, 7 - j)));
            const int lane = 4 * r + j % 4;
            for (int k = 0; k < 4; ++k) {
              masks[j / 4][2 * k] |= static_cast<uint64_t>((w >> (4 * k)) & 0xf) << (4 * lane);
              masks[j / 4][2 * k + 1] |= static_cast<uint64_t>((w >> (16 + 4 * k)) & 0xf) << (4 * lane);
            }
          }
        }
        uint8_t* sc = quad + groups * (256 + bit_bytes) + sb * kRowsX4KquantScaleBytes + 16 * r;
        std::memcpy(sc, b.scales, 12);
        std::memcpy(sc + 12, &b.d, 2);
        std::memcpy(sc + 14, &b.dmin, 2);
      }
      for (int half = 0; half < 2; ++half) {
        const uint8_t* blocks[4] = {paired[0][4 * half], paired[1][4 * half], paired[2][4 * half], paired[3][4 * half]};
        steps_of_rows(blocks, 16, quad + (2 * sb + half) * 256);
        if (kQ5) std::memcpy(quad + groups * 256 + (2 * sb + half) * 64, masks[half], 64);
      }
    }
  }
}

// Q6_K rows to the layout (tensor/rows_x4.h, repack_rows_x4 the reference): block j
// (32 columns) of a super-block takes its low four bits from a 32-byte run of ql (low
// nibbles for j % 4 < 2, high ones above) and its top two from qh[32 (j / 4) ..]
// shifted by 2 (j % 4); the nibbles are re-paired and placed as Q4_K's, the top bits
// packed four to a byte by shifts and dealt into the group's two vectors.
MOEFLOW_VNNI_ATTR void repack_q6_k_avx512(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t groups = cols / kRowsX4GroupCols, n_sb = cols / 256;
  const size_t rb = static_cast<size_t>(n_sb) * sizeof(BlockQ6_K);
  const __m128i low = _mm_set1_epi8(0x0f), high = _mm_set1_epi8(static_cast<char>(0xf0)), two = _mm_set1_epi8(3);
  alignas(64) uint8_t paired[4][8][16];  // [row][block]: q4_0's 16 bytes
  for (int64_t q = 0; q < rows / kRowsX4; ++q) {
    const uint8_t* in = src + static_cast<size_t>(4 * q) * rb;
    uint8_t* quad = dst + 4 * rb * static_cast<size_t>(q);
    for (int64_t sb = 0; sb < n_sb; ++sb) {
      uint8_t* scales = quad + groups * (256 + 128) + sb * kRowsX4Q6KScaleBytes;
      for (int r = 0; r < 4; ++r) {
        const auto& b = reinterpret_cast<const BlockQ6_K*>(in + r * rb)[sb];
        for (int j = 0; j < 8; ++j) {
          const int h = j / 4, k = j % 4;
          const uint8_t* ql = b.ql + 64 * h + 32 * (k % 2);
          const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql));
          const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16));
          _mm_store_si128(reinterpret_cast<__m128i*>(paired[r][j]),
                          k < 2 ? _mm_or_si128(_mm_and_si128(a0, low), _mm_slli_epi16(_mm_and_si128(a1, low), 4))
                                : _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a0, 4), low), _mm_and_si128(a1, high)));
          // Top bits of elements 0-15 (t0) and 16-31 (t1), one per byte.
          const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh + 32 * h));
          const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh + 32 * h + 16));
          const __m128i t0 = _mm_and_si128(_mm_srli_epi16(h0, 2 * k), two);
          const __m128i t1 = _mm_and_si128(_mm_srli_epi16(h1, 2 * k), two);
          // Steps 0-1 in bits 4-7 (elements 0-7 of each half), steps 2-3 in bits 0-3 (8-15).
          const __m128i c = _mm_or_si128(_mm_slli_epi16(t0, 4), _mm_slli_epi16(t1, 6));
          const __m128i d = _mm_or_si128(t0, _mm_slli_epi16(t1, 2));
          const __m128i e = _mm_or_si128(c, _mm_srli_si128(d, 8));  // bytes 0-3: vector 0's, 4-7: vector 1's
          uint8_t* tops = quad + groups * 256 + (2 * sb + j / 4) * 128 + 4 * (4 * r + j % 4);
          const uint64_t both = static_cast<uint64_t>(_mm_cvtsi128_si64(e));
          std::memcpy(tops, &both, 4);
          std::memcpy(tops + 64, reinterpret_cast<const uint8_t*>(&both) + 4, 4);
        }
        std::memcpy(scales + 16 * r, b.scales, 16);
        std::memcpy(scales + 64 + 2 * r, &b.d, 2);
      }
      for (int half = 0; half < 2; ++half) {
        const uint8_t* blocks[4] = {paired[0][4 * half], paired[1][4 * half], paired[2][4 * half], paired[3][4 * half]};
        steps_of_rows(blocks, 16, quad + (2 * sb + half) * 256);
      }
    }
  }
}

}  // namespace

void rows_x4_kquant_repack(DType t, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  switch (t) {
    case DType::Q4_K: repack_kq_avx512<BlockQ4_K>(src, rows, cols, dst); return;
    case DType::Q5_K: repack_kq_avx512<BlockQ5_K>(src, rows, cols, dst); return;
    case DType::Q6_K: repack_q6_k_avx512(src, rows, cols, dst); return;
    default: throw std::invalid_argument("moeflow: rows_x4_kquant_repack: not an interleaved k-quant");
  }
}

void rows_x4_kquant_dequant(DType t, const uint8_t* quad, int64_t cols, int64_t g0, int64_t n_groups, float* out,
                            int64_t ld) {
  switch (t) {
    case DType::Q4_K: dequant_kq_quad<false>(quad, cols, g0, n_groups, out, ld); return;
    case DType::Q5_K: dequant_kq_quad<true>(quad, cols, g0, n_groups, out, ld); return;
    case DType::Q6_K: dequant_q6_k_quad(quad, cols, g0, n_groups, out, ld); return;
    default: throw std::invalid_argument("moeflow: rows_x4_kquant_dequant: not an interleaved k-quant");
  }
}

#else  // never called: q4_vnni_enabled() is false, so nothing is repacked

void rows_x4_kquant_repack(DType, const uint8_t*, int64_t, int64_t, uint8_t*) {
  throw std::logic_error("moeflow: rows_x4_kquant_repack without AVX-512 VNNI");
}
void rows_x4_kquant_dequant(DType, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t) {
  throw std::logic_error("moeflow: rows_x4_kquant_dequant without AVX-512 VNNI");
}

#endif

}  // namespace moeflow::cpu
