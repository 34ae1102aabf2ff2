// See dequant_avx2.h. The functions carry their own target attribute (AVX2 without FMA,
// so that no multiply and subtract are contracted), so the file builds with the
// project's baseline flags and runs only after the CPU was checked.
#include "kernels/cpu/dequant_avx2.h"

#include <cstring>
#include <type_traits>

#include "kernels/cpu/int8_avx2.h"
#include "tensor/iquants.h"
#include "tensor/kquants.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOEFLOW_HAVE_DEQUANT_AVX2 1
#include <immintrin.h>
#define DQ_ATTR __attribute__((target("avx2")))
#endif

namespace moeflow::cpu {

#ifdef MOEFLOW_HAVE_DEQUANT_AVX2
namespace {

// 32 quants (bytes, unsigned or signed) -> scale * q, or scale * q - min, at y[0, 32).
template <bool kSigned>
DQ_ATTR inline void store32(__m256i q, float scale, float min, float* y) {
  const __m256 s = _mm256_set1_ps(scale), m = _mm256_set1_ps(min);
  const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 2; ++k) {
      const __m128i b = k == 0 ? halves[h] : _mm_srli_si128(halves[h], 8);
      const __m256i w = kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
      __m256 v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(w));
      if (min != 0.0f) v = _mm256_sub_ps(v, m);
      _mm256_storeu_ps(y + 16 * h + 8 * k, v);
    }
  }
}

DQ_ATTR inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// A block's 16 nibble bytes (byte i: elements i and 16 + i) as 32 bytes in element order.
DQ_ATTR inline __m256i nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                          _mm256_set1_epi8(0x0f));
}

DQ_ATTR inline __m256i levels(const uint8_t* qs, const int8_t* table16) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table16)));
  return _mm256_shuffle_epi8(table, nibbles(qs));
}

DQ_ATTR void q2_k(const BlockQ2_K* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int h = 0; h < 2; ++h) {
      const __m256i v = load32(b[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), _mm256_set1_epi8(3));
        alignas(32) uint8_t qb[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(qb), q);
        // Two 16-column sub-blocks with their own scale and min: each half on its own.
        for (int half = 0; half < 2; ++half) {
          const int s = 8 * h + 2 * k + half;
          const float dl = d * static_cast<float>(b[i].scales[s] & 0x0f);
          const float ml = dmin * static_cast<float>(b[i].scales[s] >> 4);
          const __m128i q16 = _mm_load_si128(reinterpret_cast<const __m128i*>(qb + 16 * half));
          for (int e = 0; e < 2; ++e) {
            const __m256i w = _mm256_cvtepu8_epi32(e == 0 ? q16 : _mm_srli_si128(q16, 8));
            const __m256 val = _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(dl), _mm256_cvtepi32_ps(w)), _mm256_set1_ps(ml));
            _mm256_storeu_ps(y + 128 * h + 32 * k + 16 * half + 8 * e, val);
          }
        }
      }
    }
  }
}

// Q3_K and Q6_K: 16-column sub-blocks with their own signed scale; q offset to signed.
DQ_ATTR inline void store_halves(__m256i q_signed, float dl0, float dl1, float* y) {
  const __m128i halves[2] = {_mm256_castsi256_si128(q_signed), _mm256_extracti128_si256(q_signed, 1)};
  for (int half = 0; half < 2; ++half) {
    const __m256 s = _mm256_set1_ps(half == 0 ? dl0 : dl1);
    for (int e = 0; e < 2; ++e) {
      const __m256i w = _mm256_cvtepi8_epi32(e == 0 ? halves[half] : _mm_srli_si128(halves[half], 8));
      _mm256_storeu_ps(y + 16 * half + 8 * e, _mm256_mul_ps(s, _mm256_cvtepi32_ps(w)));
    }
  }
}

DQ_ATTR void q3_k(const BlockQ3_K* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    const __m256i hm = load32(b[i].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i v = load32(b[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), _mm256_set1_epi8(3));
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), _mm256_set1_epi8(1)), 2);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(4));
        const int s = 8 * h + 2 * k;
        store_halves(q, d * static_cast<float>(kq_scale_q3(b[i].scales, s) - 32),
                     d * static_cast<float>(kq_scale_q3(b[i].scales, s + 1) - 32), y + 128 * h + 32 * k);
      }
    }
  }
}

template <bool kFive>
DQ_ATTR void q45_k(const uint8_t* blocks, int64_t nb, float* y) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  const auto* b = reinterpret_cast<const Block*>(blocks);
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFive) qh = load32(b[i].qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load32(b[i].qs + 32 * c);
      __m256i n[2] = {_mm256_and_si256(v, _mm256_set1_epi8(0x0f)),
                      _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f))};
      for (int j = 0; j < 2; ++j) {
        if constexpr (kFive)
          n[j] = _mm256_or_si256(
              n[j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + j), _mm256_set1_epi8(1)), 4));
        int sc, m;
        kq_scale_min_k4(b[i].scales, 2 * c + j, sc, m);
        store32<false>(n[j], d * static_cast<float>(sc), dmin * static_cast<float>(m), y + 64 * c + 32 * j);
      }
    }
  }
}

DQ_ATTR void q6_k(const BlockQ6_K* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load32(b[i].ql + 64 * h), l1 = load32(b[i].ql + 64 * h + 32), hb = load32(b[i].qh + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i low =
            _mm256_and_si256(j < 2 ? (j == 0 ? l0 : l1) : _mm256_srli_epi16(j == 2 ? l0 : l1, 4), _mm256_set1_epi8(0x0f));
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), _mm256_set1_epi8(3)), 4);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
        const int s = 8 * h + 2 * j;  // the sub-block scales of elements l < 16 and l >= 16
        store_halves(q, d * static_cast<float>(b[i].scales[s]), d * static_cast<float>(b[i].scales[s + 1]),
                     y + 128 * h + 32 * j);
      }
    }
  }
}

DQ_ATTR void iq4_nl(const BlockIQ4_NL* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) store32<true>(levels(b[i].qs, kIq4Levels), fp16_to_fp32(b[i].d), 0.0f, y);
}

DQ_ATTR void mxfp4(const BlockMXFP4* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) store32<true>(levels(b[i].qs, kMxfp4Levels), mxfp4_scale(b[i].e), 0.0f, y);
}

DQ_ATTR void iq4_xs(const BlockIQ4_XS* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((b[i].scales_h >> (2 * ib)) & 3) << 4);
      store32<true>(levels(b[i].qs + 16 * ib, kIq4Levels), d * static_cast<float>(ls - 32), 0.0f, y);
    }
  }
}

}  // namespace
#endif

bool dequant_avx2(DType t, const uint8_t* blocks, int64_t n, float* y) {
#ifdef MOEFLOW_HAVE_DEQUANT_AVX2
  if (!int8_avx2_enabled()) return false;
  switch (t) {
    case DType::Q2_K: q2_k(reinterpret_cast<const BlockQ2_K*>(blocks), n / kQK_K, y); return true;
    case DType::Q3_K: q3_k(reinterpret_cast<const BlockQ3_K*>(blocks), n / kQK_K, y); return true;
    case DType::Q4_K: q45_k<false>(blocks, n / kQK_K, y); return true;
    case DType::Q5_K: q45_k<true>(blocks, n / kQK_K, y); return true;
    case DType::Q6_K: q6_k(reinterpret_cast<const BlockQ6_K*>(blocks), n / kQK_K, y); return true;
    case DType::IQ4_NL: iq4_nl(reinterpret_cast<const BlockIQ4_NL*>(blocks), n / 32, y); return true;
    case DType::IQ4_XS: iq4_xs(reinterpret_cast<const BlockIQ4_XS*>(blocks), n / kQK_K, y); return true;
    case DType::MXFP4: mxfp4(reinterpret_cast<const BlockMXFP4*>(blocks), n / 32, y); return true;
    default: return false;
  }
#else
  (void)t, (void)blocks, (void)n, (void)y;
  return false;
#endif
}

}  // namespace moeflow::cpu
