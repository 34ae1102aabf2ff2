// The integer multiply-add peak the VNNI kernels (rows_x4_vnni.h) run against; see
// vnni_target.h for how the file builds.
#include "kernels/cpu/vnni_target.h"  // first: its pragmas must precede immintrin.h
#include "kernels/cpu/roofline.h"

#include "kernels/cpu/q4_vnni.h"

namespace moeflow::cpu {

namespace {

#ifdef MOEFLOW_HAVE_VNNI_KERNEL
// `iters` rounds of 12 independent `vpdpbusd` on registers (64 byte products each);
// returns a value depending on all of them so none is optimised away. The products are
// zero (b = 0), so the sums cannot overflow however long it runs.
MOEFLOW_VNNI_ATTR int32_t dpbusd_loop(int64_t iters) {
  constexpr int kAcc = 12;
  __m512i acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(1), b = _mm512_setzero_si512();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    asm volatile("" : "+v"(a));  // a fresh operand each round: the loop stays a loop
  }
  __m512i s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_epi32(s, acc[i]);
  return _mm512_reduce_add_epi32(s);
}
#endif

}  // namespace

double measure_peak_int8_gmacs(ThreadPool* pool) {
#ifdef MOEFLOW_HAVE_VNNI_KERNEL
  if (!cpu_has_avx512_vnni()) return 0;
  return integer_loop_gops(pool, int64_t{1} << 21, 12.0 * 64.0, dpbusd_loop);
#else
  (void)pool;
  return 0;
#endif
}

}  // namespace moeflow::cpu
