// Q4_K / Q6_K mat-vec rows with AVX-512 VNNI; see kquant_vnni.h for the arithmetic and
// vnni_target.h for how the file builds.
#include "kernels/cpu/vnni_target.h"  // first: its pragmas must precede immintrin.h
#include "kernels/cpu/kquant_vnni.h"

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/kquant_matvec.h"
#include "tensor/kquants.h"

namespace moeflow::cpu {
namespace {

// One super-block's packed activation (lanes as kquant_vnni.h describes).
struct alignas(64) PackedKq {
  int8_t hi[256];      // qx >> 8, columns in order
  uint8_t lo[256];     // qx & 255
  int32_t q6_off[16];  // lane 4k+v: -32 * sum of qx over 16-column sub-block 4v+k
  float q6_dx[16];     // lane 4k+v: dx of sub-block 4v+k's 32 columns
  float q4_dx[16];     // lane 4k+v: dx of 32-column sub-block 2v+k/2
  float q4_xsum[16];   // lane 4k+v: half the activation's sum over sub-block 2v+k/2
};
static_assert(sizeof(PackedKq) == kKquantXBlockBytes);

}  // namespace

void kquant_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  auto* p = reinterpret_cast<PackedKq*>(out);
  for (int64_t b = 0; b < cols / 256; ++b, qx += 256, dx += 8) {
    PackedKq& k = p[b];
    for (int i = 0; i < 256; ++i) {
      k.hi[i] = static_cast<int8_t>(qx[i] >> 8);
      k.lo[i] = static_cast<uint8_t>(qx[i] & 255);
    }
    int32_t sum16[16];
    for (int s = 0; s < 16; ++s) {
      sum16[s] = 0;
      for (int i = 0; i < 16; ++i) sum16[s] += qx[16 * s + i];
    }
    for (int lane = 0; lane < 16; ++lane) {
      const int k4 = lane / 4, v = lane % 4;
      const int s16 = 4 * v + k4, s32 = 2 * v + k4 / 2;
      k.q6_off[lane] = -32 * sum16[s16];
      k.q6_dx[lane] = dx[s16 / 2];
      k.q4_dx[lane] = dx[s32];
      k.q4_xsum[lane] = 0.5f * dx[s32] * static_cast<float>(sum16[2 * s32] + sum16[2 * s32 + 1]);
    }
  }
}

#ifdef MOEFLOW_HAVE_VNNI_KERNEL

#define KQ_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,f16c,fma")))

namespace {

// Lane 4k+v of the result: the sum of s_v's 128-bit lane k.
KQ_ATTR inline __m512i reduce_quads(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
  const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
  const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
}

// sum over 64 columns of w * x per 4-column lane, exactly (x = 256*hi + lo).
KQ_ATTR inline __m512i dot64(__m512i w, __m512i xhi, __m512i xlo) {
  const __m512i h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xhi);
  return _mm512_add_epi32(_mm512_slli_epi32(h, 8), _mm512_dpbusd_epi32(_mm512_setzero_si512(), xlo, w));
}

KQ_ATTR inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Byte indices turning 8 / 16 per-sub-block bytes into the reduced lanes' order.
struct LaneIndex {
  alignas(16) uint8_t q4_scale[16], q4_min[16], q6[16];
  constexpr LaneIndex() : q4_scale{}, q4_min{}, q6{} {
    for (int lane = 0; lane < 16; ++lane) {
      const int k = lane / 4, v = lane % 4;
      q4_scale[lane] = static_cast<uint8_t>(2 * v + k / 2);
      q4_min[lane] = static_cast<uint8_t>(8 + 2 * v + k / 2);
      q6[lane] = static_cast<uint8_t>(4 * v + k);
    }
  }
};
constexpr LaneIndex kLanes;

template <int R>
KQ_ATTR void rows_q4_k(const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const __m128i sc_idx = _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q4_scale));
  const __m128i m_idx = _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q4_min));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (pf) prefetch_nta(pf + b * R * static_cast<int64_t>(sizeof(BlockQ4_K)), R * sizeof(BlockQ4_K));
    const PackedKq& xb = x[b];
    __m512i xh[4], xl[4];
    for (int v = 0; v < 4; ++v) {
      xh[v] = _mm512_load_si512(xb.hi + 64 * v);
      xl[v] = _mm512_load_si512(xb.lo + 64 * v);
    }
    const __m512 dx = _mm512_load_ps(xb.q4_dx), xsum = _mm512_load_ps(xb.q4_xsum);
    for (int r = 0; r < R; ++r) {
      const auto& blk = reinterpret_cast<const BlockQ4_K*>(rows[r])[b];
      __m512i s[4];
      for (int v = 0; v < 4; ++v) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * v));
        const __m512i w = _mm512_and_si512(
            _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), nibble);
        s[v] = dot64(w, xh[v], xl[v]);
      }
      const __m512i t = reduce_quads(s[0], s[1], s[2], s[3]);
      // The 6-bit scales (bytes 0-7) and mins (bytes 8-15), as kq_scale_min_k4 reads them.
      uint32_t u[3];
      std::memcpy(u, blk.scales, 12);
      const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
      const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
      const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
      const __m128i sm = _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(m_lo), static_cast<int>(sc_hi),
                                       static_cast<int>(sc_lo));
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sm, sc_idx)));
      const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sm, m_idx)));
      const __m512 d = _mm512_set1_ps(half_to_float(blk.d)), dmin = _mm512_set1_ps(half_to_float(blk.dmin));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(_mm512_mul_ps(sc, d), dx), acc[r]);
      acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(mn, dmin), xsum, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int R>
KQ_ATTR void rows_q6_k(const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  const __m512i nibble = _mm512_set1_epi8(0x0f), hi2 = _mm512_set1_epi8(0x30);
  const __m128i sc_idx = _mm_load_si128(reinterpret_cast<const __m128i*>(kLanes.q6));
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
      const auto& blk = reinterpret_cast<const BlockQ6_K*>(rows[r])[b];
      __m512i s[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
        // Second half pre-shifted by 2: columns 32-63 (and 96-127) take bits 2-3 (6-7).
        const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i wa = _mm512_or_si512(_mm512_and_si512(ql, nibble), _mm512_and_si512(_mm512_slli_epi16(qh2, 4), hi2));
        const __m512i wb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble), _mm512_and_si512(qh2, hi2));
        s[2 * h] = dot64(wa, xh[2 * h], xl[2 * h]);
        s[2 * h + 1] = dot64(wb, xh[2 * h + 1], xl[2 * h + 1]);
      }
      const __m512i t = _mm512_add_epi32(reduce_quads(s[0], s[1], s[2], s[3]), off);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc8, sc_idx)));
      const __m512 d = _mm512_set1_ps(half_to_float(blk.d));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(_mm512_mul_ps(sc, d), dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int R>
void rows_r(DType t, const uint8_t* const* rows, int64_t blocks, const PackedKq* x, float* out, const uint8_t* pf) {
  if (t == DType::Q4_K) {
    rows_q4_k<R>(rows, blocks, x, out, pf);
  } else {
    rows_q6_k<R>(rows, blocks, x, out, pf);
  }
}

}  // namespace

void kquant_vnni_rows(DType t, const uint8_t* const* rows, int R, int64_t blocks, const uint8_t* packed, float* out,
                      const uint8_t* pf) {
  if (t != DType::Q4_K && t != DType::Q6_K) throw std::invalid_argument("moeflow: kquant_vnni_rows: not q4_k / q6_k");
  const auto* x = reinterpret_cast<const PackedKq*>(packed);
  switch (R) {
    case 1: rows_r<1>(t, rows, blocks, x, out, pf); return;
    case 2: rows_r<2>(t, rows, blocks, x, out, pf); return;
    case 3: rows_r<3>(t, rows, blocks, x, out, pf); return;
    case 4: rows_r<4>(t, rows, blocks, x, out, pf); return;
    default: throw std::invalid_argument("moeflow: kquant_vnni_rows: R must be 1..4");
  }
}

#else  // no VNNI kernel on this architecture: kquant_vnni_type() is false, never called

void kquant_vnni_rows(DType, const uint8_t* const*, int, int64_t, const uint8_t*, float*, const uint8_t*) {
  throw std::logic_error("moeflow: kquant_vnni_rows without the VNNI kernel");
}

#endif

}  // namespace moeflow::cpu
