// q4_0 mat-vec rows with AVX-512 VNNI; see q4_vnni.h for the arithmetic. The functions
// carry their own target attribute, so the file builds with the project's baseline
// flags and the instructions run only after q4_vnni_enabled() has checked the CPU.

// GCC 12's AVX-512 headers build their "undefined" pass-through operands from
// self-initialised locals and then warn about them (fixed in GCC 13); this must come
// before the first include that can pull in immintrin.h.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/q4_vnni.h"

#include <atomic>

#include "tensor/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOEFLOW_HAVE_VNNI_KERNEL 1
#include <immintrin.h>
#define MOEFLOW_VNNI_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")))
#endif

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

// One group's packed activation (kQ4VnniGroupBytes): for each of the 4 blocks b, its
// elements 0-15 go to byte b*16+i of the *_first arrays and elements 16-31 to the
// *_second arrays, matching the low and high nibbles of the block's 16 bytes.
struct alignas(64) PackedGroup {
  int8_t hi_first[64], hi_second[64];    // x >> 8 (signed)
  uint8_t lo_first[64], lo_second[64];   // x & 255
  int32_t neg_offset[16];                // lane 4b+q: -8 * sum of the 8 elements it covers
  float dx[16];                          // lane 4b+q: block b's activation scale
};
static_assert(sizeof(PackedGroup) == kQ4VnniGroupBytes);

}  // namespace

bool q4_vnni_enabled() { return cpu_has_vnni() && g_enabled.load(std::memory_order_relaxed); }
void set_q4_vnni_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

#ifdef MOEFLOW_HAVE_VNNI_KERNEL

MOEFLOW_VNNI_ATTR void q4_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  auto* groups = reinterpret_cast<PackedGroup*>(out);
  for (int64_t g = 0; g < cols / kQ4VnniGroupCols; ++g) {
    PackedGroup& p = groups[g];
    for (int b = 0; b < 4; ++b) {
      const int16_t* xb = qx + g * kQ4VnniGroupCols + 32 * b;
      const __m512i v = _mm512_loadu_si512(xb);
      const __m256i lo = _mm512_cvtepi16_epi8(v);  // truncates: the low bytes
      const __m256i hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p.lo_first + 16 * b), _mm256_castsi256_si128(lo));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p.lo_second + 16 * b), _mm256_extracti128_si256(lo, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p.hi_first + 16 * b), _mm256_castsi256_si128(hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p.hi_second + 16 * b), _mm256_extracti128_si256(hi, 1));
      // Lane 4b+q holds elements 4q..4q+3 and 16+4q..16+4q+3 of the block.
      for (int q = 0; q < 4; ++q) {
        int32_t s = 0;
        for (int i = 4 * q; i < 4 * q + 4; ++i) s += xb[i] + xb[16 + i];
        p.neg_offset[4 * b + q] = -8 * s;
        p.dx[4 * b + q] = dx[g * 4 + b];
      }
    }
  }
}

namespace {
// Byte i of the four blocks' quants: block b = i / 16 starts 18*b bytes into the group,
// its quants 2 bytes later. Bytes 0-63 come from the load at the group start, later
// ones (index bit 6 set) from the load 8 bytes in.
struct QuantIndex {
  alignas(64) uint8_t v[64];
  constexpr QuantIndex() : v{} {
    for (int i = 0; i < 64; ++i) {
      const int src = 18 * (i / 16) + 2 + i % 16;
      v[i] = static_cast<uint8_t>(src < 64 ? src : 64 + (src - 8));
    }
  }
};
constexpr QuantIndex kQuantIndex;
// Word i (< 16) of the scales: block i / 4's f16 scale at byte 18 * (i / 4).
struct ScaleIndex {
  alignas(64) uint16_t v[32];
  constexpr ScaleIndex() : v{} {
    for (int i = 0; i < 32; ++i) v[i] = static_cast<uint16_t>(9 * ((i % 16) / 4));
  }
};
constexpr ScaleIndex kScaleIndex;
}  // namespace

namespace {
template <int R>
MOEFLOW_VNNI_ATTR void rows_vnni(const uint8_t* const* rows, int64_t groups, const uint8_t* xp, float* out,
                                 const uint8_t* pf) {
  constexpr int64_t kRowGroupBytes = 4 * sizeof(BlockQ4_0);  // 72
  const __m512i quant_idx = _mm512_load_si512(kQuantIndex.v);
  const __m512i scale_idx = _mm512_load_si512(kScaleIndex.v);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const auto* xg = reinterpret_cast<const PackedGroup*>(xp);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    if (pf) {
      const uint8_t* p = pf + g * R * kRowGroupBytes;
      for (int64_t off = 0; off < R * kRowGroupBytes + 63; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
    }
    const PackedGroup& x = xg[g];
    const __m512i hi_first = _mm512_load_si512(x.hi_first), hi_second = _mm512_load_si512(x.hi_second);
    const __m512i lo_first = _mm512_load_si512(x.lo_first), lo_second = _mm512_load_si512(x.lo_second);
    const __m512i neg_offset = _mm512_load_si512(x.neg_offset);
    const __m512 dx = _mm512_load_ps(x.dx);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = rows[r] + g * kRowGroupBytes;
      const __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 8);  // bytes 0-71 of the group
      const __m512i q = _mm512_permutex2var_epi8(a, quant_idx, b);
      const __m512i w_first = _mm512_and_si512(q, nibble);                        // elements 0-15
      const __m512i w_second = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);  // elements 16-31
      __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w_first, hi_first);
      hi = _mm512_dpbusd_epi32(hi, w_second, hi_second);
      __m512i lo = _mm512_dpbusd_epi32(neg_offset, lo_first, w_first);
      lo = _mm512_dpbusd_epi32(lo, lo_second, w_second);
      const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo));
      const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scale_idx, a)));
      acc[r] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}
}  // namespace

// Plain calls into the attributed kernel (a function template's own target attribute
// is not applied to its explicit instantiations by GCC 12).
template <int R>
void q4_vnni_rows(const uint8_t* const* rows, int64_t groups, const uint8_t* xp, float* out, const uint8_t* pf) {
  rows_vnni<R>(rows, groups, xp, out, pf);
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
