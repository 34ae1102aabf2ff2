// q4_0 mat-vec rows in 8-bit integer dot products (AVX-512 VNNI + VBMI), for CPUs that
// have them (Intel Ice Lake and later, AMD Zen 4 and later); every other CPU keeps the
// Highway kernel in matmul.cpp, which converts each weight to f32.
//
// Why: decoding q4_0 reads half the bytes of q8_0, so it is only faster if the kernel
// keeps up with memory. The f32 kernel spends ~10 vector instructions per block of 32
// weights and one core ran it from cache at 18-20 GB/s, below what DRAM delivers. Here
// four consecutive blocks of a row share one 512-bit vector (~11 integer instructions
// per row and 128 weights), and four rows' sums are reduced to one vector of (row,
// block) sums before the float conversion and scaling, which then run once for the
// four rows (~15% faster than each row converting and scaling its own sums). `moeflow
// bench-kernels --threads 1` on a Zen 5 core: 29-37 GB/s from cache against 19-21 for
// the f32 kernel. A q8_0 kernel built the same way (GGUF's layout) ran at 30 GB/s from
// cache against 50 for the int16 Highway kernel, so q8_0 in GGUF's layout stays there.
//
// The resident model's rows interleaved in fours have their own kernels, for q4_0 and
// q8_0 (rows_x4_vnni.h); they share the switch below.
//
// Arithmetic: the activation is first quantised to int16 per 32-element block
// (QuantizeX16, as the q8_0 kernel uses) and split into bytes, x = 256*hi + lo with
// hi signed and lo unsigned, so that vpdpbusd (unsigned byte x signed byte, four
// products per 32-bit lane) computes sum (w * x) exactly as 256*sum(w*hi) + sum(w*lo);
// the nibbles' offset of 8 is taken off with a precomputed 8*sum(x) per lane. The only
// rounding beyond f32 is the activation's 2^-16 per block, as for q8_0.
#pragma once
#include <cstddef>
#include <cstdint>

namespace moeflow::cpu {

// True when this CPU has the instructions (AVX-512 F/BW/VL/DQ, VNNI, VBMI).
bool cpu_has_avx512_vnni();
// True when this CPU has them and the VNNI paths (these kernels and rows_x4_vnni.h's)
// are not switched off.
bool q4_vnni_enabled();
// Tests and A/B benchmarks switch the paths off to compare with the Highway kernels.
void set_q4_vnni_enabled(bool on);

// Rows are processed four blocks (128 columns) at a time: the packed activation has
// q4_vnni_x_bytes(cols) bytes for the cols / 128 whole groups (blocks past the last
// whole group are left to the caller).
constexpr int64_t kQ4VnniGroupCols = 128;
constexpr size_t kQ4VnniGroupBytes = 384;
inline size_t q4_vnni_x_bytes(int64_t cols) {
  return static_cast<size_t>(cols / kQ4VnniGroupCols) * kQ4VnniGroupBytes;
}

// Packs qx (int16 per element) and dx (f32 per 32-element block), as QuantizeX16
// writes them, into the kernel's per-group layout at out (64-byte aligned).
void q4_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out);

// out[r] = sum over the first `groups` * 128 columns of row r (rows[r] points at the
// row's first q4_0 block) times the activation packed by q4_vnni_pack_x. R is 1 or 4.
// pf, when not null, is prefetched a little at every group (the next rows' bytes).
template <int R>
void q4_vnni_rows(const uint8_t* const* rows, int64_t groups, const uint8_t* xp, float* out, const uint8_t* pf);

}  // namespace moeflow::cpu
