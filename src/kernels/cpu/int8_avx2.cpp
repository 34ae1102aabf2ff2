// Mat-vec rows of q4_0, q8_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS and MXFP4 with AVX2 and int8
// activations; see int8_avx2.h for the arithmetic. The functions carry their own target attribute, so
// the file builds with the project's baseline flags and the instructions run only
// after int8_avx2_enabled() checked the CPU.
#include "kernels/cpu/int8_avx2.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/f16_table.h"
#include "kernels/cpu/lattice_decode.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/quantize_x8.h"
#include "kernels/cpu/row_token_tiles.h"
#include "tensor/iquants.h"
#include "tensor/kquants.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOEFLOW_HAVE_INT8_AVX2 1
#include <immintrin.h>
#define A8_ATTR __attribute__((target("avx2,fma")))
// A kernel's per-block or per-super-block step: lambdas take no target from their
// enclosing function, and must be inlined into it.
#define A8_LAMBDA __attribute__((target("avx2,fma"), always_inline))
#endif

namespace moeflow::cpu {
namespace {

std::atomic<bool> g_enabled{true};

bool cpu_has_avx2() {
#ifdef MOEFLOW_HAVE_INT8_AVX2
  // libgcc's check includes the OS saving the AVX registers (XCR0).
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

bool kernel_type(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4: return true;
    default: return false;
  }
}

// Whether t's packed activation is on the super-block grid (int8_avx2.h).
bool super_grid(DType t) { return dtype_is_kquant(t) || t == DType::IQ4_XS; }

// q4_0's and MXFP4's packed activations group their 32-column blocks in fours (int8_avx2.h).
bool quad_grid(DType t) { return t == DType::Q4_0 || t == DType::MXFP4; }
// What their kernels add to a quant to make it unsigned: q4_0's nibbles are n - 8,
// MXFP4's levels -12..12.
int quad_offset(DType t) { return t == DType::Q4_0 ? 8 : 12; }
int64_t quads_of(int64_t cols) { return (cols / 32 + 3) / 4; }
// The block of a quad (a, b, c, d = 0..3) whose products each of the kernel's 8 float
// lanes holds: [a a c c | b b d d].
constexpr int kQuadLaneBlock[8] = {0, 0, 2, 2, 1, 1, 3, 3};

// The packed activation's arrays (int8_avx2.h): d per 32 columns on the 32-column grid;
// d per 256 columns and bs on the super-block grid; for the quads (q4_0, MXFP4), d holds
// per quad the blocks' scales and then o c in kQuadLaneBlock's order (o: the offset / 2).
struct PackedView {
  const int8_t* q;
  const float* d;
  const int16_t* bs;  // sum(q) per 16 columns
};
PackedView view(DType t, const uint8_t* p, int64_t cols) {
  const auto* q = reinterpret_cast<const int8_t*>(p);
  if (quad_grid(t)) return {q, reinterpret_cast<const float*>(p + 128 * quads_of(cols)), nullptr};
  const auto* d = reinterpret_cast<const float*>(p + cols);
  return {q, d, super_grid(t) ? reinterpret_cast<const int16_t*>(d + cols / 256) : nullptr};
}

// The quads of blocks a, b, c, d (zero blocks after the last one): the int8 values as
// [a0-15 b0-15 a16-31 b16-31 c0-15 d0-15 c16-31 d16-31], the order in which the kernel
// unpacks the blocks' nibbles, then the scales and offsets in its lane order
// (int8_avx2.h).
void pack_quads(const float* x, int64_t nb, int offset, int8_t* q, float* dc) {
  for (int64_t g = 0; g < quads_of(32 * nb); ++g) {
    int8_t blocks[4][32] = {};
    float d[4] = {0, 0, 0, 0}, c[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4 && 4 * g + k < nb; ++k) {
      d[k] = quantize_x8_block(x + 32 * (4 * g + k), blocks[k]);
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += blocks[k][j];
      c[k] = -d[k] * static_cast<float>(sum);
    }
    int8_t* o = q + 128 * g;
    for (int pair = 0; pair < 2; ++pair)
      for (int half = 0; half < 2; ++half)
        for (int k = 0; k < 2; ++k) std::memcpy(o + 64 * pair + 32 * half + 16 * k, blocks[2 * pair + k] + 16 * half, 16);
    float* f = dc + 16 * g;
    for (int lane = 0; lane < 8; ++lane) {
      // Each block's products land in 2 of the 8 lanes, so each lane adds offset / 2 c.
      f[lane] = d[kQuadLaneBlock[lane]];
      f[8 + lane] = static_cast<float>(offset / 2) * c[kQuadLaneBlock[lane]];
    }
  }
}

}  // namespace

bool int8_avx2_enabled() { return cpu_has_avx2() && g_enabled.load(std::memory_order_relaxed); }
void set_int8_avx2_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool int8_avx2_type(DType t, RowLayout layout) {
  // The lattice i-quants have no AVX-512 kernel: theirs here ran 1.4-2.9x faster than one
  // on the VNNI kernels' pairs of blocks (docs/performance.md), so every AVX2 CPU takes it.
  return kernel_type(t) && layout == RowLayout::gguf && int8_avx2_enabled() &&
         (!q4_vnni_enabled() || dtype_is_lattice_iquant(t));
}

size_t int8_avx2_x_bytes(DType t, int64_t cols) {
  const auto n = static_cast<size_t>(cols);
  if (quad_grid(t)) return static_cast<size_t>(quads_of(cols)) * (128 + 16 * sizeof(float));
  return super_grid(t) ? n + n / 256 * sizeof(float) + n / 16 * sizeof(int16_t) : n + n / 32 * sizeof(float);
}

void int8_avx2_pack_x8_reference(DType t, const float* x, int64_t cols, uint8_t* out) {
  auto* q = reinterpret_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(out + cols);
  if (super_grid(t)) {
    auto* bs = reinterpret_cast<int16_t*>(d + cols / 256);
    for (int64_t s = 0; s < cols / 256; ++s) d[s] = quantize_x8<256>(x + 256 * s, q + 256 * s);
    for (int64_t h = 0; h < cols / 16; ++h) {
      int32_t sum = 0;
      for (int j = 0; j < 16; ++j) sum += q[16 * h + j];
      bs[h] = static_cast<int16_t>(sum);
    }
    return;
  }
  const int64_t nb = cols / 32;
  if (quad_grid(t)) return pack_quads(x, nb, quad_offset(t), q, reinterpret_cast<float*>(out + 128 * quads_of(cols)));
  for (int64_t b = 0; b < nb; ++b) d[b] = quantize_x8_block(x + 32 * b, q + 32 * b);
}

#ifdef MOEFLOW_HAVE_INT8_AVX2
namespace {

// The packings with AVX2: the same bytes as the reference (which calls libm's nearbyintf
// for every value, a visible share of a batched step's time). Rounding:
// vcvtps2dq rounds to nearest even in the default MXCSR mode, as nearbyint does in the
// default rounding mode; |x / d| <= 127 up to a few ulps, and the saturating packs clamp
// as the reference does. The maximum takes |x| as its first operand so that a NaN is
// passed over, as std::max(amax, |x|) does.

A8_ATTR inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

A8_ATTR inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(_mm_movehl_ps(m, m), m);
  return _mm_cvtss_f32(_mm_max_ss(_mm_movehdup_ps(m), m));
}

// max |x| over n floats (n a multiple of 32).
A8_ATTR inline float amax_of(const float* x, int n) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + j)), m);
  return hmax(m);
}

// 32 floats times inv, rounded, as int8 in column order.
A8_ATTR inline __m256i round_32(const float* x, __m256 inv) {
  const __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
  const __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), inv));
  const __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), inv));
  const __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), inv));
  // The packs work within 128-bit lanes: dwords 0-3 hold elements 0-3 of v0..v3 and
  // dwords 4-7 their elements 4-7; the permutation puts them back in column order.
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The sums of the four groups of 8 int8 values in q, in 64-bit lanes (sad of q + 128
// against zero, less 8 * 128).
A8_ATTR inline __m256i sums_of_8(__m256i q) {
  return _mm256_sub_epi64(_mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(-128)), _mm256_setzero_si256()),
                          _mm256_set1_epi64x(8 * 128));
}

// A block of 32 quantised as quantize_x8_block does, and the sum of its values.
struct Block32 {
  __m256i q;
  float d;
  int32_t sum;
};
A8_ATTR inline Block32 quantize_32(const float* x) {
  const X8Scale s = x8_scale(amax_of(x, 32));
  const __m256i q = round_32(x, _mm256_set1_ps(s.inv));
  const __m256i s8 = sums_of_8(q);
  const __m128i s16 = _mm_add_epi64(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  return {q, s.d, static_cast<int32_t>(_mm_cvtsi128_si64(_mm_add_epi64(s16, _mm_unpackhi_epi64(s16, s16))))};
}

A8_ATTR inline void store32(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

A8_ATTR void pack_quads_avx2(const float* x, int64_t nb, int offset, int8_t* q, float* dc) {
  const float o = static_cast<float>(offset / 2);
  for (int64_t g = 0; g < quads_of(32 * nb); ++g) {
    // Zero blocks after the last one, with c = +0 (as the reference leaves them; -d * 0
    // would be -0).
    Block32 b[4];
    float c[4];
    for (int k = 0; k < 4; ++k) {
      const bool present = 4 * g + k < nb;
      b[k] = present ? quantize_32(x + 32 * (4 * g + k)) : Block32{_mm256_setzero_si256(), 0.0f, 0};
      c[k] = present ? o * (-b[k].d * static_cast<float>(b[k].sum)) : 0.0f;
    }
    for (int pair = 0; pair < 2; ++pair) {
      const __m256i lo = b[2 * pair].q, hi = b[2 * pair + 1].q;
      store32(q + 128 * g + 64 * pair, _mm256_permute2x128_si256(lo, hi, 0x20));       // a0-15 b0-15
      store32(q + 128 * g + 64 * pair + 32, _mm256_permute2x128_si256(lo, hi, 0x31));  // a16-31 b16-31
    }
    for (int lane = 0; lane < 8; ++lane) {
      dc[16 * g + lane] = b[kQuadLaneBlock[lane]].d;
      dc[16 * g + 8 + lane] = c[kQuadLaneBlock[lane]];
    }
  }
}

A8_ATTR void pack_super_avx2(const float* x, int64_t cols, int8_t* q, float* d, int16_t* bs) {
  for (int64_t s = 0; s < cols / 256; ++s) {
    const X8Scale sc = x8_scale(amax_of(x + 256 * s, 256));
    d[s] = sc.d;
    const __m256 inv = _mm256_set1_ps(sc.inv);
    for (int k = 0; k < 8; ++k) {
      const __m256i v = round_32(x + 256 * s + 32 * k, inv);
      store32(q + 256 * s + 32 * k, v);
      // Sums of 16: the 64-bit lanes' pairs, each within int16 (|sum| <= 16 * 128).
      const __m256i s8 = sums_of_8(v);
      const __m256i s16 = _mm256_add_epi64(s8, _mm256_srli_si256(s8, 8));  // lanes 0 and 2
      bs[16 * s + 2 * k] = static_cast<int16_t>(_mm256_extract_epi64(s16, 0));
      bs[16 * s + 2 * k + 1] = static_cast<int16_t>(_mm256_extract_epi64(s16, 2));
    }
  }
}

A8_ATTR void pack_blocks_avx2(const float* x, int64_t nb, int8_t* q, float* d) {
  for (int64_t b = 0; b < nb; ++b) {
    const Block32 k = quantize_32(x + 32 * b);  // its sum unused (and dropped: inlined)
    store32(q + 32 * b, k.q);
    d[b] = k.d;
  }
}

}  // namespace
#endif

void int8_avx2_pack_x8(DType t, const float* x, int64_t cols, uint8_t* out) {
#ifdef MOEFLOW_HAVE_INT8_AVX2
  if (cpu_has_avx2()) {
    auto* q = reinterpret_cast<int8_t*>(out);
    auto* d = reinterpret_cast<float*>(out + cols);
    if (super_grid(t)) return pack_super_avx2(x, cols, q, d, reinterpret_cast<int16_t*>(d + cols / 256));
    if (quad_grid(t))
      return pack_quads_avx2(x, cols / 32, quad_offset(t), q, reinterpret_cast<float*>(out + 128 * quads_of(cols)));
    return pack_blocks_avx2(x, cols / 32, q, d);
  }
#endif
  int8_avx2_pack_x8_reference(t, x, cols, out);
}

#ifdef MOEFLOW_HAVE_INT8_AVX2
namespace {

A8_ATTR inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

A8_ATTR inline void prefetch(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes + 63; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_NTA);
}

// A block scale (f16) in all lanes, from detail::f16_table() (which a kernel reads once
// before its loop: the table's first-use guard inside the loop would make the compiler
// keep the accumulators in memory around its possible call).
A8_ATTR inline __m256 scale_of(const float* f16, uint16_t h) { return _mm256_broadcast_ss(f16 + h); }

A8_ATTR inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Unsigned quants (0..63) against token block k: int32 lanes of sum q * q_x times the
// int16 factors of scale16 (ones, or a sub-block scale).
A8_ATTR inline __m256i dot_u8(__m256i q, const PackedView& x, int64_t k, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(x.q + 32 * k)), scale16);
}

// Blocks [0, nb) of a row: step(b, acc) adds block b into acc[0, T), even blocks into
// one set of accumulators and odd ones into another, so that each FMA chain waits on
// every second block only (one chain per (row, token) is bound by the FMA's latency at
// one token). Then out[t] = the sum of both.
template <int T, class Step>
A8_ATTR inline void two_chains(int64_t nb, float* out, Step&& step) {
  __m256 even[T], odd[T];
  for (int t = 0; t < T; ++t) even[t] = odd[t] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    step(b, even);
    step(b + 1, odd);
  }
  if (b < nb) step(b, even);
  for (int t = 0; t < T; ++t) out[t] = hsum(_mm256_add_ps(even[t], odd[t]));
}

// The 16 levels of IQ4_NL / IQ4_XS (kIq4Levels) or MXFP4 (kMxfp4Levels) in both 128-bit
// lanes, for a byte shuffle to map nibbles to them.
A8_ATTR inline __m256i level_table(const int8_t* levels) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels)));
}

// MXFP4's scale 2^(e - 128) for every e (the levels are kept doubled).
const float* mxfp4_scales() {
  static const std::vector<float> table = [] {
    std::vector<float> t(256);
    for (int e = 0; e < 256; ++e) t[static_cast<size_t>(e)] = mxfp4_scale(static_cast<uint8_t>(e));
    return t;
  }();
  return table.data();
}

// q4_0 and MXFP4, four blocks a, b, c, d at a time: the 32 bytes of nibbles [a | b]
// give the low nibbles (elements 0-15 of a, then of b) and the high ones (16-31) as two
// vectors, matching the packed activation's order, and [c | d] likewise; MXFP4's
// nibbles then become its levels plus 12 (a byte shuffle), q4_0's stay n = (n - 8) + 8.
// Per token the two vpmaddubsw of a pair add in int16 (block a in the low 128-bit lane,
// b in the high one), and one vphaddw adds neighbouring lanes of both pairs (at most
// 8 * 24 * 127 = 24384, so int16 holds it), leaving [a c | b d], four int16 lanes a
// block. So one vpmaddwd, conversion and pair of FMAs serve four blocks, against the
// activation's scales and offsets and the weights' scales in kQuadLaneBlock's order.
template <int T, DType kType>
A8_ATTR __attribute__((noinline)) void row_quads(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                 const uint8_t* pf) {
  using Block = std::conditional_t<kType == DType::MXFP4, BlockMXFP4, BlockQ4_0>;
  const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0f);
  const auto* blk = reinterpret_cast<const Block*>(row);
  // MXFP4's level table and exponent scales, q4_0's f16 scales: each type sets up only its own.
  [[maybe_unused]] __m256i table;
  const float* scales;
  if constexpr (kType == DType::MXFP4) {
    table = _mm256_add_epi8(level_table(kMxfp4Levels), _mm256_set1_epi8(12));
    scales = mxfp4_scales();
  } else {
    scales = detail::f16_table();
  }
  auto scale = [&](const Block& b) A8_LAMBDA {
    if constexpr (kType == DType::MXFP4) return _mm_broadcast_ss(scales + b.e);
    else return _mm_broadcast_ss(scales + b.d);
  };
  auto nibbles = [&](const Block* a) A8_LAMBDA {  // [a | b]
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[0].qs))),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[1].qs)), 1);
  };
  auto unsigned_quants = [&](__m256i v, __m256i& lo, __m256i& hi) A8_LAMBDA {
    lo = _mm256_and_si256(v, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if constexpr (kType == DType::MXFP4) {
      lo = _mm256_shuffle_epi8(table, lo);
      hi = _mm256_shuffle_epi8(table, hi);
    }
  };
  // [d_a d_a d_c d_c | d_b d_b d_d d_d] from the four scales (each in every lane).
  auto quad_scales = [&](__m128 a, __m128 b, __m128 c, __m128 d) A8_LAMBDA {
    return _mm256_set_m128(_mm_shuffle_ps(b, d, 0), _mm_shuffle_ps(a, c, 0));
  };
  // Quad g: its nibbles [a | b] and [c | d], its scales in lane order.
  auto step = [&](int64_t g, __m256i ab_nibbles, __m256i cd_nibbles, __m256 d, __m256* acc) A8_LAMBDA {
    __m256i lo_ab, hi_ab, lo_cd, hi_cd;
    unsigned_quants(ab_nibbles, lo_ab, hi_ab);
    unsigned_quants(cd_nibbles, lo_cd, hi_cd);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int8_t* q = xs[t].q + 128 * g;
      const __m256i ab =
          _mm256_add_epi16(_mm256_maddubs_epi16(lo_ab, load32(q)), _mm256_maddubs_epi16(hi_ab, load32(q + 32)));
      const __m256i cd =
          _mm256_add_epi16(_mm256_maddubs_epi16(lo_cd, load32(q + 64)), _mm256_maddubs_epi16(hi_cd, load32(q + 96)));
      const float* dc = xs[t].d + 16 * g;
      const __m256 s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_hadd_epi16(ab, cd), ones)),
                                       _mm256_loadu_ps(dc), _mm256_loadu_ps(dc + 8));
      acc[t] = _mm256_fmadd_ps(s, d, acc[t]);
    }
  };
  const int64_t nb = cols / 32;
  two_chains<T>(nb / 4, out, [&](int64_t g, __m256* acc) A8_LAMBDA {
    if (pf) prefetch(pf + 4 * g * static_cast<int64_t>(sizeof(Block)), 4 * sizeof(Block));
    const Block* a = blk + 4 * g;
    step(g, nibbles(a), nibbles(a + 2), quad_scales(scale(a[0]), scale(a[1]), scale(a[2]), scale(a[3])), acc);
  });
  const int rest = static_cast<int>(nb % 4);
  if (rest == 0) return;
  // The last one to three blocks, with zero blocks after them (whose packed activation
  // is zero too), read without reading past the row.
  const Block* a = blk + nb / 4 * 4;
  if (pf) prefetch(pf + nb / 4 * 4 * static_cast<int64_t>(sizeof(Block)), rest * static_cast<int64_t>(sizeof(Block)));
  auto alone = [&](const Block& b) A8_LAMBDA {  // [b | 0]
    return _mm256_set_m128i(_mm_setzero_si128(), _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
  };
  const __m128 none = _mm_setzero_ps();
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  step(nb / 4, rest >= 2 ? nibbles(a) : alone(a[0]), rest == 3 ? alone(a[2]) : _mm256_setzero_si256(),
       quad_scales(scale(a[0]), rest >= 2 ? scale(a[1]) : none, rest == 3 ? scale(a[2]) : none, none), acc);
  for (int t = 0; t < T; ++t) out[t] += hsum(acc[t]);
}

// q8_0: signed quants, so |q| meets q_x with q's sign; per token d_x sum q q_x times d.
template <int T>
A8_ATTR __attribute__((noinline)) void row_q8_0(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                const uint8_t* pf) {
  const __m256i ones = _mm256_set1_epi16(1);
  const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
  const float* const f16 = detail::f16_table();
  two_chains<T>(cols / 32, out, [&](int64_t b, __m256* acc) A8_LAMBDA {
    if (pf) prefetch(pf + b * static_cast<int64_t>(sizeof(BlockQ8_0)), sizeof(BlockQ8_0));
    const __m256i q = load32(blk[b].qs), aq = _mm256_sign_epi8(q, q);
    const __m256 d = scale_of(f16, blk[b].d);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(load32(xs[t].q + 32 * b), q));
      const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), _mm256_broadcast_ss(xs[t].d + b));
      acc[t] = _mm256_fmadd_ps(s, d, acc[t]);
    }
  });
}

// A super-block's float scales: d for the integer sums; for the types with mins (Q2_K,
// Q4_K, Q5_K) dmin and the mins as 16 int16 (one per 16 columns), which multiply the
// activation's sums.
struct SuperScales {
  __m256 d, dmin;
  __m256i mins16;
};

// Token t's 16 sums of q_x per 16 columns of super-block s.
A8_ATTR inline __m256i block_sums(const PackedView& x, int64_t s) { return load32(x.bs + 16 * s); }

// The super-blocks of a row (256 columns each), on the 256-column grid: step(blk, s,
// isum) adds super-block s's integer sums into isum[0, T) (zeroed for it) and returns
// its scales; token t's total then gains d d_x isum[t] - dmin d_x mins . sums once.
// out[t] = the token's total, its lanes summed.
template <int T, class Block, bool kMins, class Step>
A8_ATTR inline void super_blocks(const uint8_t* row, int64_t cols, const PackedView* xs, float* out, const uint8_t* pf,
                                 Step&& step) {
  const auto* blk = reinterpret_cast<const Block*>(row);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < cols / kQK_K; ++s) {
    if (pf) prefetch(pf + s * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    const SuperScales sc = step(blk[s], s, isum);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_broadcast_ss(xs[t].d + s);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(sc.d, dx), acc[t]);
      if constexpr (kMins)
        acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sc.mins16, block_sums(xs[t], s))),
                                  _mm256_mul_ps(sc.dmin, dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);
}

// The two 32-column blocks' products of a pair of unpacked quant vectors, each by its
// int16 factors, summed: one add into a token's isum per two blocks.
A8_ATTR inline __m256i two_blocks(__m256i q0, __m256i s0, __m256i q1, __m256i s1, const PackedView& x, int64_t k0,
                                  int64_t k1) {
  return _mm256_add_epi32(dot_u8(q0, x, k0, s0), dot_u8(q1, x, k1, s1));
}

// The sixteen 16-column sub-block scales of a super-block as int16 (lane j: sub-block j)
// -> the vpmaddwd factor of 32-column block m: sub-block 2m in the low 128-bit lane,
// 2m + 1 in the high one (a dword permute, then a byte shuffle within each lane).
A8_ATTR inline __m256i pair_scale(__m256i scales16, int m) {
  const __m256i pair = _mm256_permutevar8x32_epi32(scales16, _mm256_set1_epi32(m));
  return _mm256_shuffle_epi8(pair, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                                    2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
}

// Q4_K's (and Q5_K's) 12 scale bytes -> 8 scales (bytes 0-7) and 8 mins (8-15), with
// word operations: sub-blocks 0-3 keep 6 bits in bytes 0-3 / 4-7; 4-7 their low 4 in the
// nibbles of bytes 8-11 and their top 2 in the top bits of bytes 0-7 (kq_scale_min_k4).
inline void q4_k_scales(const uint8_t* scales12, uint8_t* out16) {
  uint32_t w[3];
  std::memcpy(w, scales12, 12);
  const uint32_t six = 0x3f3f3f3fu, four = 0x0f0f0f0fu, two = 0x03030303u;
  const uint32_t o[4] = {w[0] & six, (w[2] & four) | (((w[0] >> 6) & two) << 4), w[1] & six,
                         ((w[2] >> 4) & four) | (((w[1] >> 6) & two) << 4)};
  std::memcpy(out16, o, 16);
}

// Q3_K's 12 scale bytes -> its 16 6-bit scales (unsigned, to be used minus 32): low 4
// bits in the nibbles of bytes 0-7 (low for sub-blocks 0-7), top 2 in bytes 8-11 at bit
// 2 (j / 4) (kq_scale_q3).
inline void q3_k_scales(const uint8_t* scales12, uint8_t* out16) {
  uint32_t w[3];
  std::memcpy(w, scales12, 12);
  const uint32_t four = 0x0f0f0f0fu, two = 0x03030303u;
  const uint32_t o[4] = {(w[0] & four) | ((w[2] & two) << 4), (w[1] & four) | (((w[2] >> 2) & two) << 4),
                         ((w[0] >> 4) & four) | (((w[2] >> 4) & two) << 4),
                         ((w[1] >> 4) & four) | (((w[2] >> 6) & two) << 4)};
  std::memcpy(out16, o, 16);
}

// Q4_K / Q5_K: per super-block the 8 scales and mins decoded once; per 64 columns 32
// quant bytes hold sub-blocks 2c (low nibbles) and 2c + 1 (high), Q5_K's fifth bits in
// bits 2c and 2c + 1 of qh. Per token sum sc * sum(n q_x) in int32 lanes, times d d_x;
// minus dmin d_x times the mins (each twice, per 16 columns) dotted with the block sums.
template <int T, bool kFive>
A8_ATTR __attribute__((noinline)) void row_q45_k(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                 const uint8_t* pf) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  const __m256i low4 = _mm256_set1_epi8(0x0f), bit0 = _mm256_set1_epi8(1);
  const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const float* const f16 = detail::f16_table();
  auto step = [&](const Block& blk, int64_t s, __m256i* isum) A8_LAMBDA {
    alignas(16) uint8_t sc[16];  // 8 scales, then 8 mins
    q4_k_scales(blk.scales, sc);
    __m256i qh;
    if constexpr (kFive) qh = load32(blk.qh);
#pragma GCC unroll 1
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load32(blk.qs + 32 * c);
      __m256i n0 = _mm256_and_si256(v, low4), n1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      if constexpr (kFive) {  // bits 2c and 2c + 1 of qh, at bits 0 and 1 here
        n0 = _mm256_or_si256(n0, _mm256_slli_epi16(_mm256_and_si256(qh, bit0), 4));
        n1 = _mm256_or_si256(n1, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), bit0), 4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m256i s0 = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c]));
      const __m256i s1 = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c + 1]));
      const int64_t k = 8 * s + 2 * c;
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], two_blocks(n0, s0, n1, s1, xs[t], k, k + 1));
    }
    const __m256i mins16 =
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8)), twice));
    return SuperScales{scale_of(f16, blk.d), scale_of(f16, blk.dmin), mins16};
  };
  super_blocks<T, Block, true>(row, cols, xs, out, pf, step);
}

// Q6_K: per 128 columns 64 bytes of low nibbles and 32 of 2-bit highs make four 32-column
// blocks of unsigned quants q (0..63), the weight d sc (q - 32); vpmaddwd multiplies the
// int16 pair sums of a block's two 16-column halves by their scales, and 32 sc is taken
// off with the block sums, all in int32.
template <int T>
A8_ATTR __attribute__((noinline)) void row_q6_k(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                const uint8_t* pf) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3);
  const float* const f16 = detail::f16_table();
  auto step = [&](const BlockQ6_K& blk, int64_t s, __m256i* isum) A8_LAMBDA {
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
#pragma GCC unroll 1
    for (int h = 0; h < 2; ++h) {
      __m256i l0 = load32(blk.ql + 64 * h), l1 = load32(blk.ql + 64 * h + 32), hb = load32(blk.qh + 32 * h);
      // Blocks 4h + j, two at a time (j = 2p: l0's nibbles, j = 2p + 1: l1's; the highs in
      // bits 2j of hb), so that the unpacked quants and their factors stay in registers.
#pragma GCC unroll 1
      for (int p = 0; p < 2; ++p) {
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(hb, two), 4));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, low4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), two), 4));
        const __m256i f0 = pair_scale(scales16, 4 * h + 2 * p), f1 = pair_scale(scales16, 4 * h + 2 * p + 1);
        const int64_t kb = 8 * s + 4 * h + 2 * p;
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], two_blocks(q0, f0, q1, f1, xs[t], kb, kb + 1));
        l0 = _mm256_srli_epi16(l0, 4);
        l1 = _mm256_srli_epi16(l1, 4);
        hb = _mm256_srli_epi16(hb, 4);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(_mm256_madd_epi16(scales16, block_sums(xs[t], s)), 5));
    return SuperScales{scale_of(f16, blk.d), {}, {}};
  };
  super_blocks<T, BlockQ6_K, false>(row, cols, xs, out, pf, step);
}

// Q2_K / Q3_K: per 128 columns 32 bytes hold four 32-column blocks in bit pairs 2k
// (Q3_K's third bit in hmask at bit 4h + k), unsigned against the 16-column sub-blocks'
// scales in vpmaddwd (Q3_K's minus 32, signed). Q3_K's offset of 4 (its weight is
// d (sc - 32) (q - 4)) comes off the int32 sums with the block sums; Q2_K's mins
// (d sc q - dmin m) are the block sums times m, times dmin d_x.
template <int T, bool kThree>
A8_ATTR __attribute__((noinline)) void row_q23_k(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                 const uint8_t* pf) {
  using Block = std::conditional_t<kThree, BlockQ3_K, BlockQ2_K>;
  const __m256i two = _mm256_set1_epi8(3), bit0 = _mm256_set1_epi8(1);
  const float* const f16 = detail::f16_table();
  auto step = [&](const Block& blk, int64_t s, __m256i* isum) A8_LAMBDA {
    __m256i scales16;
    if constexpr (kThree) {
      alignas(16) uint8_t raw[16];
      q3_k_scales(blk.scales, raw);
      scales16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(raw)), _mm_set1_epi8(32)));
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
      scales16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0f)));
    }
    __m256i hm;
    if constexpr (kThree) hm = load32(blk.hmask);
#pragma GCC unroll 1
    for (int h = 0; h < 2; ++h) {
      __m256i v = load32(blk.qs + 32 * h);
      // Blocks 4h + k (bit pair 2k of v; Q3_K's third bit at bit 4h + k of hm), two at a
      // time, so that the unpacked quants and their factors stay in registers.
#pragma GCC unroll 1
      for (int p = 0; p < 2; ++p) {
        __m256i q0 = _mm256_and_si256(v, two), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 2), two);
        if constexpr (kThree) {
          q0 = _mm256_or_si256(q0, _mm256_slli_epi16(_mm256_and_si256(hm, bit0), 2));
          q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_slli_epi16(hm, 1), _mm256_slli_epi16(bit0, 2)));
          hm = _mm256_srli_epi16(hm, 2);
        }
        const __m256i f0 = pair_scale(scales16, 4 * h + 2 * p), f1 = pair_scale(scales16, 4 * h + 2 * p + 1);
        const int64_t kb = 8 * s + 4 * h + 2 * p;
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], two_blocks(q0, f0, q1, f1, xs[t], kb, kb + 1));
        v = _mm256_srli_epi16(v, 4);
      }
    }
    if constexpr (kThree) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(_mm256_madd_epi16(scales16, block_sums(xs[t], s)), 2));
      return SuperScales{scale_of(f16, blk.d), {}, {}};
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
      return SuperScales{scale_of(f16, blk.d), scale_of(f16, blk.dmin), mins16};
    }
  };
  super_blocks<T, Block, !kThree>(row, cols, xs, out, pf, step);
}

// A 32-column block's 16 nibble bytes (byte i: elements i and 16 + i) as its 32 signed
// levels in element order.
A8_ATTR inline __m256i levels_of(const uint8_t* qs, __m256i table) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i n = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                                     _mm256_set1_epi8(0x0f));
  return _mm256_shuffle_epi8(table, n);
}
// Signed levels (|l| <= 127) against token block k: |l| meets q_x with l's sign.
A8_ATTR inline __m256i dot_signed(__m256i l, const PackedView& x, int64_t k, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(l, l), _mm256_sign_epi8(load32(x.q + 32 * k), l)),
                           scale16);
}

// IQ4_NL: per 32-column block levels from the shuffle, per token d_x sum l q_x times the
// block's scale.
template <int T>
A8_ATTR __attribute__((noinline)) void row_iq4_nl(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                  const uint8_t* pf) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table = level_table(kIq4Levels);
  const auto* blk = reinterpret_cast<const BlockIQ4_NL*>(row);
  const float* const f16 = detail::f16_table();
  two_chains<T>(cols / 32, out, [&](int64_t b, __m256* acc) A8_LAMBDA {
    if (pf) prefetch(pf + b * static_cast<int64_t>(sizeof(BlockIQ4_NL)), sizeof(BlockIQ4_NL));
    const __m256i l = levels_of(blk[b].qs, table);
    const __m256 d = scale_of(f16, blk[b].d);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(dot_signed(l, xs[t], b, ones)), _mm256_broadcast_ss(xs[t].d + b));
      acc[t] = _mm256_fmadd_ps(s, d, acc[t]);
    }
  });
}

// Byte i (0..31) all ones where bit i of mask is set, else zero: the mask broadcast,
// byte i taking the mask's byte i / 8 and testing bit i % 8.
A8_ATTR inline __m256i bit_bytes(uint32_t mask) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
  const __m256i bits = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(mask)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits);
}

// Q4_1, Q5_0, Q5_1 (tensor/legacy_quants.h): a block's quants unpacked to bytes in
// element order, the 5-bit types' fifth bit from qh (bit_bytes). Q5_0's q - 16 are signed levels (dot_signed, as IQ4_NL's);
// Q4_1's and Q5_1's unsigned quants meet q_x directly, and their minimum m adds
// m d_x sum q_x, the activation block's sum taken with the same two multiplies against
// ones.
template <int T, DType kType>
A8_ATTR __attribute__((noinline)) void row_legacy(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                  const uint8_t* pf) {
  constexpr bool kFive = kType != DType::Q4_1, kMin = kType != DType::Q5_0;
  constexpr int64_t kBytes = kType == DType::Q4_1 ? 20 : kType == DType::Q5_0 ? 22 : 24;
  const __m256i ones = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1), nibble = _mm256_set1_epi8(0x0f);
  const float* const f16 = detail::f16_table();
  two_chains<T>(cols / 32, out, [&](int64_t b, __m256* acc) A8_LAMBDA {
    const uint8_t* blk = row + b * kBytes;
    if (pf) prefetch(pf + b * kBytes, kBytes);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBytes - 16));
    __m256i q = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1), nibble);
    if constexpr (kFive) {
      uint32_t qh;
      std::memcpy(&qh, blk + (kMin ? 4 : 2), 4);
      q = _mm256_or_si256(q, _mm256_and_si256(bit_bytes(qh), _mm256_set1_epi8(0x10)));
    }
    uint16_t dh;
    std::memcpy(&dh, blk, 2);
    const __m256 d = scale_of(f16, dh);
    if constexpr (kMin) {
      uint16_t mh;
      std::memcpy(&mh, blk + 2, 2);
      const __m256 m = scale_of(f16, mh);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 dx = _mm256_broadcast_ss(xs[t].d + b);
        const __m256 sum = _mm256_cvtepi32_ps(dot_u8(ones8, xs[t], b, ones));
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot_u8(q, xs[t], b, ones)), dx), d, acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(sum, dx), m, acc[t]);
      }
    } else {
      const __m256i l = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(dot_signed(l, xs[t], b, ones)), _mm256_broadcast_ss(xs[t].d + b));
        acc[t] = _mm256_fmadd_ps(s, d, acc[t]);
      }
    }
  });
}

// The lattice i-quants (lattice_decode.h): per 32-column block its grid bytes, the sign
// of each weight moved onto the activation (vpsignb by -1 or 1), and per int32 lane the
// scale of the 16 weights it sums; IQ1's (8 g ± 1) built from its points -1, 0, 1.
template <int T, DType kType>
A8_ATTR __attribute__((noinline)) void row_lattice(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                   const uint8_t* pf) {
  constexpr int64_t kBytes = kLatticeBytes<kType>;
  const LatticeTables tb;
  const __m256i ones = _mm256_set1_epi16(1), one8 = _mm256_set1_epi8(1);
  float scale = 0;
  two_chains<T>(cols / 32, out, [&](int64_t b, __m256* acc) A8_LAMBDA {
    const uint8_t* sb = row + (b / 8) * kBytes;
    if (pf && b % 8 == 0) prefetch(pf + (b / 8) * kBytes, kBytes);
    if (b % 8 == 0) scale = lattice_scale<kType>(sb);  // two_chains visits the blocks in order
    constexpr bool kIq3 = kType == DType::IQ3_XXS || kType == DType::IQ3_S;
    const int blk = static_cast<int>(b % 8);
    const LatticeBlock lb = lattice_block<kType, !kIq3>(tb, sb, blk);
    __m256i v;
    if constexpr (kIq3) {  // the block's eight 4-byte points gathered: IQ3_S's ninth index bit from qh
      __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 2 + 8 * blk)));
      if constexpr (kType == DType::IQ3_S) {
        const __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(sb[66 + blk]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        idx = _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), 8));
      }
      v = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kType == DType::IQ3_S ? tb.iq3s : tb.iq3xxs), idx, 8);
    } else {
      v = _mm256_set_epi64x(static_cast<int64_t>(lb.g[3]), static_cast<int64_t>(lb.g[2]), static_cast<int64_t>(lb.g[1]),
                            static_cast<int64_t>(lb.g[0]));
    }
    __m256i w, negv;
    if constexpr (kType == DType::IQ1_S || kType == DType::IQ1_M) {
      const __m256i z = _mm256_cmpeq_epi8(v, _mm256_setzero_si256()), m = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(-1));
      const __m256i d = bit_bytes(lb.shift_neg);
      // |8 g ± 1|: 9 where g and the shift agree in sign, 7 for the other g != 0, 1 for g = 0.
      const __m256i nine = _mm256_or_si256(_mm256_andnot_si256(_mm256_or_si256(_mm256_or_si256(z, m), d), _mm256_set1_epi8(-1)),
                                           _mm256_and_si256(m, d));
      w = _mm256_blendv_epi8(_mm256_blendv_epi8(_mm256_set1_epi8(7), _mm256_set1_epi8(9), nine), one8, z);
      negv = _mm256_or_si256(m, _mm256_and_si256(z, d));
    } else {
      w = v;
      negv = bit_bytes(lb.neg);
    }
    const __m256i sgn = _mm256_or_si256(negv, one8);  // -1 where negative, else 1
    const __m256 dw = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_setr_epi32(lb.fac[0], lb.fac[0], lb.fac[0], lb.fac[0], lb.fac[1], lb.fac[1], lb.fac[1],
                                             lb.fac[1])),
        _mm256_set1_ps(scale));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i x = _mm256_sign_epi8(load32(xs[t].q + 32 * b), sgn);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_broadcast_ss(xs[t].d + b)), acc[t]);
    }
  });
}

// IQ4_XS: per super-block d, per 32-column sub-block its 6-bit scale minus 32 (signed)
// multiplying in vpmaddwd, its 16 bytes of nibbles as IQ4_NL's block; int32 sums a token.
template <int T>
A8_ATTR __attribute__((noinline)) void row_iq4_xs(const uint8_t* row, int64_t cols, const PackedView* xs, float* out,
                                                  const uint8_t* pf) {
  const __m256i table = level_table(kIq4Levels);
  const float* const f16 = detail::f16_table();
  auto step = [&](const BlockIQ4_XS& blk, int64_t s, __m256i* isum) A8_LAMBDA {
#pragma GCC unroll 1
    for (int j = 0; j < 8; j += 2) {
      __m256i l[2], f[2];
      for (int i = 0; i < 2; ++i) {
        const int ls = ((blk.scales_l[j / 2] >> (4 * i)) & 0x0f) | (((blk.scales_h >> (2 * (j + i))) & 3) << 4);
        f[i] = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
        l[i] = levels_of(blk.qs + 16 * (j + i), table);
      }
      const int64_t kb = 8 * s + j;
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(dot_signed(l[0], xs[t], kb, f[0]),
                                                             dot_signed(l[1], xs[t], kb + 1, f[1])));
    }
    return SuperScales{scale_of(f16, blk.d), {}, {}};
  };
  super_blocks<T, BlockIQ4_XS, false>(row, cols, xs, out, pf, step);
}

template <int T>
A8_ATTR void row(DType t, const uint8_t* w, int64_t cols, const PackedView* xs, float* out, const uint8_t* pf) {
  switch (t) {
    case DType::Q4_0: row_quads<T, DType::Q4_0>(w, cols, xs, out, pf); return;
    case DType::Q8_0: row_q8_0<T>(w, cols, xs, out, pf); return;
    case DType::Q2_K: row_q23_k<T, false>(w, cols, xs, out, pf); return;
    case DType::Q3_K: row_q23_k<T, true>(w, cols, xs, out, pf); return;
    case DType::IQ4_NL: row_iq4_nl<T>(w, cols, xs, out, pf); return;
    case DType::Q4_1: row_legacy<T, DType::Q4_1>(w, cols, xs, out, pf); return;
    case DType::Q5_0: row_legacy<T, DType::Q5_0>(w, cols, xs, out, pf); return;
    case DType::Q5_1: row_legacy<T, DType::Q5_1>(w, cols, xs, out, pf); return;
    case DType::IQ2_XXS: row_lattice<T, DType::IQ2_XXS>(w, cols, xs, out, pf); return;
    case DType::IQ2_XS: row_lattice<T, DType::IQ2_XS>(w, cols, xs, out, pf); return;
    case DType::IQ2_S: row_lattice<T, DType::IQ2_S>(w, cols, xs, out, pf); return;
    case DType::IQ3_XXS: row_lattice<T, DType::IQ3_XXS>(w, cols, xs, out, pf); return;
    case DType::IQ3_S: row_lattice<T, DType::IQ3_S>(w, cols, xs, out, pf); return;
    case DType::IQ1_S: row_lattice<T, DType::IQ1_S>(w, cols, xs, out, pf); return;
    case DType::IQ1_M: row_lattice<T, DType::IQ1_M>(w, cols, xs, out, pf); return;
    case DType::MXFP4: row_quads<T, DType::MXFP4>(w, cols, xs, out, pf); return;
    case DType::IQ4_XS: row_iq4_xs<T>(w, cols, xs, out, pf); return;
    case DType::Q4_K: row_q45_k<T, false>(w, cols, xs, out, pf); return;
    case DType::Q5_K: row_q45_k<T, true>(w, cols, xs, out, pf); return;
    default: row_q6_k<T>(w, cols, xs, out, pf); return;
  }
}

}  // namespace

void int8_avx2_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const uint8_t* packed, float* out,
                    const uint8_t* pf) {
  const PackedView x = view(t, packed, cols);
  const int64_t rb = static_cast<int64_t>(row_bytes(t, cols));
  for (int r = 0; r < R; ++r) row<1>(t, rows[r], cols, &x, out + r, pf ? pf + r * rb : nullptr);
}

void int8_avx2_rows_tokens(DType t, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t cols,
                           const uint8_t* const* packed, int n_tok, float* const* outs, const uint8_t* pf_end) {
  // The tokens' views once for all rows.
  thread_local std::vector<PackedView> xs;
  xs.resize(static_cast<size_t>(n_tok));
  for (int k = 0; k < n_tok; ++k) xs[static_cast<size_t>(k)] = view(t, packed[k], cols);
  // Four tokens a pass: a row's accumulators for four stay within AVX2's sixteen registers.
  for_row_tokens(W, rb, r0, r1, n_tok, outs, pf_end, [&](auto T, const uint8_t* w, int t0, float* y, const uint8_t* pf) {
    row<decltype(T)::value>(t, w, cols, xs.data() + t0, y, pf);
  });
}
#else
void int8_avx2_rows(DType, const uint8_t* const*, int, int64_t, const uint8_t*, float*, const uint8_t*) {}
void int8_avx2_rows_tokens(DType, const uint8_t*, size_t, int64_t, int64_t, int64_t, const uint8_t* const*, int,
                           float* const*, const uint8_t*) {}
#endif

}  // namespace moeflow::cpu
