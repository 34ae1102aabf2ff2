// What the AVX-512 VNNI kernel files (q4_vnni.cpp, rows_x4_vnni.cpp) share: include it
// first in each. Their functions carry their own target attribute (MOEFLOW_VNNI_ATTR),
// so the files build with the project's baseline flags and the instructions run only
// after cpu_has_avx512_vnni() / q4_vnni_enabled() checked the CPU.
#pragma once

// GCC 12's AVX-512 headers build their "undefined" pass-through operands from
// self-initialised locals and then warn about them (fixed in GCC 13); this must come
// before the first include that can pull in immintrin.h, so in the including file's
// whole translation unit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOEFLOW_HAVE_VNNI_KERNEL 1
#include <immintrin.h>
#define MOEFLOW_VNNI_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")))

namespace moeflow::cpu {
// Prefetches [p, p + bytes) (and the line after it), non-temporal as matmul.cpp's
// PrefetchStep: a decode step reads each weight once.
MOEFLOW_VNNI_ATTR inline void prefetch_nta(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes + 63; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_NTA);
}
// The lines that start in [p, p + bytes) (and, with first, the one p lies in), so
// consecutive calls over adjacent ranges prefetch each line once: 4.5 instead of 6
// instructions per 288-byte q4_0 quad group.
MOEFLOW_VNNI_ATTR inline void prefetch_lines_nta(const uint8_t* p, int64_t bytes, bool first) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t l = first ? a & ~uintptr_t{63} : (a + 63) & ~uintptr_t{63}; l < a + bytes; l += 64)
    _mm_prefetch(reinterpret_cast<const char*>(l), _MM_HINT_NTA);
}
}  // namespace moeflow::cpu
#endif
