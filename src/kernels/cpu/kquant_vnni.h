// Q4_K, Q5_K and Q6_K mat-vec rows in 8-bit integer dot products (AVX-512 VNNI), for CPUs
// with q4_vnni_enabled(); see kquant_matvec.h for the dispatch and q4_vnni.h for the
// arithmetic they share: the activation is quantised to int16 per 32 columns and split
// into bytes, x = 256*hi + lo (hi signed, lo unsigned), so that vpdpbusd computes
// sum w*x exactly as 256*sum(w*hi) + sum(lo*w) with the weights' unsigned quants
// (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63). Q6_K's offset of 32 is taken off with a precomputed
// 32*sum(x) per 16 columns; Q4_K's and Q5_K's mins with the activation's sum per 32
// columns. Q5_K is Q4_K's kernel with each byte's fifth bit added from qh.
//
// Per super-block of 256 columns a row's quants are four 64-byte vectors of 64
// consecutive columns (Q4_K: a 32-byte load of nibbles and its high nibbles; Q6_K: low
// nibbles and 2-bit highs merged), dotted with the activation's two byte planes. The
// 16 int32 lanes of the four vectors' sums are reduced (unpack/add) to one vector whose
// lane 4k+v holds the sum of vector v's 128-bit lane k (16 columns), so the int->float
// conversion and the sub-block scales apply once per 16 lanes: Q6_K's lane 4k+v is its
// sub-block 4v+k; Q4_K's (32-column sub-blocks) lane 4k+v is half of sub-block 2v+k/2.
// The only rounding beyond f32 is the activation's 2^-16 per 32 columns.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// Packs qx / dx (QuantizeX16's output) for cols / 256 super-blocks into out
// (kquant_x_bytes(cols), 64-byte aligned); both kernels read the same layout.
void kquant_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out);

// out[r] = row r times the packed activation over `blocks` super-blocks; t is Q4_K,
// Q5_K or Q6_K, R 1..4. REQUIRES q4_vnni_enabled().
void kquant_vnni_rows(DType t, const uint8_t* const* rows, int R, int64_t blocks, const uint8_t* packed, float* out,
                      const uint8_t* pf);

// nb blocks of t dequantised with AVX-512, bit-identical to dequantize_row; false (and
// nothing written) for types without such a path (Q4_K and Q6_K have one).
// REQUIRES q4_vnni_enabled().
bool kquant_avx512_dequant(DType t, const uint8_t* blocks, int64_t nb, float* y);

}  // namespace moeflow::cpu
