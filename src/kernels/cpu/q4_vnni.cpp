// q4_0 mat-vec rows with AVX-512 VNNI; see q4_vnni.h for the arithmetic and
// vnni_target.h for how the file builds.
#include "kernels/cpu/vnni_target.h"  // first: its pragmas must precede immintrin.h
#include "kernels/cpu/q4_vnni.h"

#include <atomic>

#include "tensor/dtype.h"

namespace moeflow::cpu {
namespace {

bool cpu_has_vnni() {
#ifdef MOEFLOW_HAVE_VNNI_KERNEL
  // libgcc's check includes the OS saving the AVX-512 registers (XCR0).
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
  return ok;
#else
  return false;
#endif
}

std::atomic<bool> g_enabled{true};

// One q4_0 group's packed activation: for each of the 4 blocks b, its elements 0-15
// go to byte b*16+i of the *_first arrays and elements 16-31 to the *_second arrays,
// matching the low and high nibbles of the block's 16 bytes.
struct alignas(64) PackedQ4 {
  int8_t hi_first[64], hi_second[64];    // x >> 8 (signed)
  uint8_t lo_first[64], lo_second[64];   // x & 255
  int32_t neg_offset[16];                // lane 4b+q: -8 * sum of the 8 elements it covers
  float dx[16];                          // lane 4b+q: block b's activation scale
};
static_assert(sizeof(PackedQ4) == kQ4VnniGroupBytes);

}  // namespace

bool cpu_has_avx512_vnni() { return cpu_has_vnni(); }
bool q4_vnni_enabled() { return cpu_has_vnni() && g_enabled.load(std::memory_order_relaxed); }
void set_q4_vnni_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

#ifdef MOEFLOW_HAVE_VNNI_KERNEL

namespace {
// Per 32-bit lane, the sum of its 4 signed / unsigned bytes.
MOEFLOW_VNNI_ATTR inline __m512i lane_sums_signed(__m512i bytes) {
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), bytes);
}
MOEFLOW_VNNI_ATTR inline __m512i lane_sums_unsigned(__m512i bytes) {
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), bytes, _mm512_set1_epi8(1));
}
// The low and high bytes of 32 int16 values.
MOEFLOW_VNNI_ATTR inline void split_bytes(const int16_t* x, __m256i& lo, __m256i& hi) {
  const __m512i v = _mm512_loadu_si512(x);
  lo = _mm512_cvtepi16_epi8(v);  // truncates: the low bytes
  hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8));
}
}  // namespace

namespace {
// One group of 128 columns of qx / dx, packed as PackedQ4 describes.
MOEFLOW_VNNI_ATTR inline void pack_group(const int16_t* qx, const float* dx, PackedQ4& p) {
  for (int b = 0; b < 4; ++b) {
    __m256i lo, hi;
    split_bytes(qx + 32 * b, lo, hi);
    _mm_store_si128(reinterpret_cast<__m128i*>(p.lo_first + 16 * b), _mm256_castsi256_si128(lo));
    _mm_store_si128(reinterpret_cast<__m128i*>(p.lo_second + 16 * b), _mm256_extracti128_si256(lo, 1));
    _mm_store_si128(reinterpret_cast<__m128i*>(p.hi_first + 16 * b), _mm256_castsi256_si128(hi));
    _mm_store_si128(reinterpret_cast<__m128i*>(p.hi_second + 16 * b), _mm256_extracti128_si256(hi, 1));
  }
  // Lane 4b+q holds elements 4q..4q+3 and 16+4q..16+4q+3 of block b: x = 256*hi + lo.
  const __m512i hi_sum = _mm512_add_epi32(lane_sums_signed(_mm512_load_si512(p.hi_first)),
                                          lane_sums_signed(_mm512_load_si512(p.hi_second)));
  const __m512i lo_sum = _mm512_add_epi32(lane_sums_unsigned(_mm512_load_si512(p.lo_first)),
                                          lane_sums_unsigned(_mm512_load_si512(p.lo_second)));
  const __m512i x_sum = _mm512_add_epi32(_mm512_slli_epi32(hi_sum, 8), lo_sum);
  _mm512_store_si512(p.neg_offset, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(x_sum, 3)));
  for (int l = 0; l < 16; ++l) p.dx[l] = dx[l / 4];
}
}  // namespace

MOEFLOW_VNNI_ATTR void q4_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  auto* groups = reinterpret_cast<PackedQ4*>(out);
  for (int64_t g = 0; g < cols / kQ4VnniGroupCols; ++g) pack_group(qx + g * kQ4VnniGroupCols, dx + 4 * g, groups[g]);
}

namespace {
// Gather tables over the two loads of a row's group of 4 blocks (72 bytes: an f16 scale
// and 16 quant bytes each): the load at the group's start (bytes 0-63, index < 64) and
// the one 8 bytes in (index bit 6 set: byte 64 + j is group byte 8 + j).
struct Q4Gather {
  // vpermt2b: byte i = quant byte i % 16 of block i / 16, at 18 * (i / 16) + 2 + i % 16.
  alignas(64) uint8_t quants[64];
  // vpermw (one row): word l = block l / 4's scale, at byte 18 * (l / 4).
  alignas(64) uint16_t scales[32];
  // vpermt2w over rows (r, r + 1): word 4b + q = block b's scale of row r + q % 2.
  alignas(64) uint16_t pair_scales[32];
  constexpr Q4Gather() : quants{}, scales{}, pair_scales{} {
    for (int i = 0; i < 64; ++i) {
      const int src = 18 * (i / 16) + 2 + i % 16;
      quants[i] = static_cast<uint8_t>(src < 64 ? src : 64 + (src - 8));
    }
    for (int l = 0; l < 16; ++l) {
      scales[l] = static_cast<uint16_t>(9 * (l / 4));
      pair_scales[l] = static_cast<uint16_t>(9 * (l / 4) + (l % 2 ? 32 : 0));
    }
  }
};
constexpr Q4Gather kQ4Gather;
constexpr int64_t kGroupBytes = 4 * sizeof(BlockQ4_0);  // 72: a row's group of 4 blocks

// The f16 scales of one row's group (block b in lanes 4b..4b+3) times the
// activation's scales.
MOEFLOW_VNNI_ATTR inline __m512 lane_scales(__m512i group_start, __m512i scale_idx, __m512 dx) {
  return _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scale_idx, group_start))), dx);
}

// Row r's integer sums of one q4_0 group (block b in lanes 4b..4b+3).
MOEFLOW_VNNI_ATTR inline __m512i q4_group_sums(const uint8_t* p, __m512i quant_idx, const PackedQ4& x, __m512i& a) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  a = _mm512_loadu_si512(p);
  const __m512i b = _mm512_loadu_si512(p + 8);  // bytes 0-71 of the group
  const __m512i q = _mm512_permutex2var_epi8(a, quant_idx, b);
  const __m512i w_first = _mm512_and_si512(q, nibble);                        // elements 0-15
  const __m512i w_second = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);  // elements 16-31
  __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w_first, _mm512_load_si512(x.hi_first));
  hi = _mm512_dpbusd_epi32(hi, w_second, _mm512_load_si512(x.hi_second));
  __m512i lo = _mm512_dpbusd_epi32(_mm512_load_si512(x.neg_offset), _mm512_load_si512(x.lo_first), w_first);
  lo = _mm512_dpbusd_epi32(lo, _mm512_load_si512(x.lo_second), w_second);
  return _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
}

// Four rows: their sums are first reduced to one per (row, block), lane 4b + r, so the
// conversions and scale products run once for the four rows.
MOEFLOW_VNNI_ATTR void rows_q4_x4(const uint8_t* const* rows, int64_t groups, const uint8_t* xp, float* out,
                                  const uint8_t* pf) {
  const __m512i quant_idx = _mm512_load_si512(kQ4Gather.quants);
  const __m512i scale_idx = _mm512_load_si512(kQ4Gather.pair_scales);
  const auto* xg = reinterpret_cast<const PackedQ4*>(xp);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    if (pf) prefetch_nta(pf + g * 4 * kGroupBytes, 4 * kGroupBytes);
    const PackedQ4& x = xg[g];
    __m512i a0, a1, a2, a3;
    const __m512i s0 = q4_group_sums(rows[0] + g * kGroupBytes, quant_idx, x, a0);
    const __m512i s1 = q4_group_sums(rows[1] + g * kGroupBytes, quant_idx, x, a1);
    const __m512i s2 = q4_group_sums(rows[2] + g * kGroupBytes, quant_idx, x, a2);
    const __m512i s3 = q4_group_sums(rows[3] + g * kGroupBytes, quant_idx, x, a3);
    const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
    const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
    const __m512i d01 = _mm512_permutex2var_epi16(a0, scale_idx, a1);
    const __m512i d23 = _mm512_permutex2var_epi16(a2, scale_idx, a3);
    const __m512i d = _mm512_mask_blend_epi16(0xccccccccu, d01, d23);  // words 4b+2, 4b+3 from rows 2, 3
    const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_load_ps(x.dx)), acc);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  for (int r = 0; r < 4; ++r) out[r] = lanes[r] + lanes[4 + r] + lanes[8 + r] + lanes[12 + r];
}

// One row (the rows left after the groups of four).
MOEFLOW_VNNI_ATTR void rows_q4_x1(const uint8_t* row, int64_t groups, const uint8_t* xp, float* out) {
  const __m512i quant_idx = _mm512_load_si512(kQ4Gather.quants);
  const __m512i scale_idx = _mm512_load_si512(kQ4Gather.scales);
  const auto* xg = reinterpret_cast<const PackedQ4*>(xp);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i a;
    const __m512 s = _mm512_cvtepi32_ps(q4_group_sums(row + g * kGroupBytes, quant_idx, xg[g], a));
    acc = _mm512_fmadd_ps(s, lane_scales(a, scale_idx, _mm512_load_ps(xg[g].dx)), acc);
  }
  *out = _mm512_reduce_add_ps(acc);
}
}  // namespace

// Plain calls into the attributed kernel (a function template's own target attribute
// is not applied to its explicit instantiations by GCC 12).
template <int R>
void q4_vnni_rows(const uint8_t* const* rows, int64_t groups, const uint8_t* xp, float* out, const uint8_t* pf) {
  static_assert(R == 1 || R == 4);
  if constexpr (R == 4) {
    rows_q4_x4(rows, groups, xp, out, pf);
  } else {
    rows_q4_x1(rows[0], groups, xp, out);
  }
}

#else  // no VNNI kernel on this architecture: q4_vnni_enabled() is false, never called

void q4_vnni_pack_x(const int16_t*, const float*, int64_t, uint8_t*) {}
template <int R>
void q4_vnni_rows(const uint8_t* const*, int64_t, const uint8_t*, float* out, const uint8_t*) {
  for (int r = 0; r < R; ++r) out[r] = 0.0f;
}

#endif

template void q4_vnni_rows<1>(const uint8_t* const*, int64_t, const uint8_t*, float*, const uint8_t*);
template void q4_vnni_rows<4>(const uint8_t* const*, int64_t, const uint8_t*, float*, const uint8_t*);

}  // namespace moeflow::cpu
