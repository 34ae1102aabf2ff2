// The integer multiply-add peak the AVX2 int8 kernels (int8_avx2.h) run against on
// CPUs without AVX-512 VNNI. The loop carries its own target attribute, so the file
// builds with the project's baseline flags and the loop runs only after the CPU check.
#include "kernels/cpu/roofline.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOEFLOW_HAVE_AVX2_PROBE 1
#include <immintrin.h>
#endif

namespace moeflow::cpu {

namespace {

#ifdef MOEFLOW_HAVE_AVX2_PROBE
constexpr int kChains = 4;

// `iters` rounds of kChains independent vpmaddubsw -> vpmaddwd -> vpaddd (32 byte
// products each); returns a value depending on all of them so none is optimised away.
// Each chain multiplies its own register, and those and b are made opaque every round,
// so the compiler can neither merge the chains, nor hoist the products out of the loop,
// nor fold them (b = 0 is known only at run time); the products are zero, so the sums
// cannot overflow however long it runs.
__attribute__((target("avx2"))) int32_t maddubs_loop(int64_t iters) {
  __m256i acc[kChains], a[kChains];
  for (int i = 0; i < kChains; ++i) {
    acc[i] = _mm256_set1_epi32(i);
    a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  }
  __m256i b = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 4
    for (int i = 0; i < kChains; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a[i], b), ones));
    asm volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(b));
  }
  __m256i s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi32(s, acc[i]);
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  int32_t sum = 0;
  for (int32_t v : lanes) sum += v;
  return sum;
}
#endif

}  // namespace

double measure_peak_int8_avx2_gmacs(ThreadPool* pool) {
#ifdef MOEFLOW_HAVE_AVX2_PROBE
  if (!__builtin_cpu_supports("avx2")) return 0;
  return integer_loop_gops(pool, int64_t{1} << 21, kChains * 32.0, maddubs_loop);
#else
  (void)pool;
  return 0;
#endif
}

}  // namespace moeflow::cpu
