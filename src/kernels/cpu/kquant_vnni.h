// k-quant (Q2_K .. Q6_K) mat-vec rows in 8-bit integer dot products (AVX-512 VNNI), for CPUs
// with q4_vnni_enabled(); see kquant_matvec.h for the dispatch and q4_vnni.h for the
// arithmetic they share: the activation is quantised to int16 per 32 columns and split
// into bytes, x = 256*hi + lo (hi signed, lo unsigned), so that vpdpbusd computes
// sum w*x exactly as 256*sum(w*hi) + sum(lo*w) with the weights' unsigned quants
// (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63). Q6_K's and Q3_K's offsets
// (32, 4) are taken off with a precomputed sum(x) per 16 columns; the mins of Q2_K (per
// 16 columns), Q4_K and Q5_K (per 32) with the activation's sum. Q5_K is Q4_K's kernel
// with each byte's fifth bit added from qh, Q3_K Q2_K's with its third from hmask.
//
// Per super-block of 256 columns a row's quants are four 64-byte vectors of 64
// columns (Q4_K, Q5_K: the low and high nibbles of 64 quant bytes, against the
// activation's columns rearranged once per block to match; Q6_K: nibbles and 2-bit highs
// merged; Q2_K, Q3_K: 2-bit fields), dotted with the activation's two byte planes. The
// 16 int32 lanes of the four vectors' sums are reduced (unpack/add) to one vector whose
// lane 4k+v holds the sum of vector v's 128-bit lane k (16 columns), so the int->float
// conversion and the sub-block scales apply once per 16 lanes: for the 16-column
// sub-blocks (Q2_K, Q3_K, Q6_K) lane 4k+v is sub-block 4v+k; Q4_K's and Q5_K's 32-column
// sub-blocks each cover two lanes (kquant_vnni.cpp's q4_lane_block).
// The only rounding beyond f32 is the activation's 2^-16 per 32 columns (2^-8 with
// int8 activations).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// Packs qx / dx (QuantizeX16's output) for cols / 256 super-blocks into out
// (kquant_x_bytes(cols), 64-byte aligned); both kernels read the same layout.
void kquant_vnni_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out);

// The activation quantised to int8 per 32 columns (quantize_x8.h) in the same layout:
// the int8 values in the high plane, the low one zero. The kernels then take one
// vpdpbusd per 64 columns instead of two (`--activations int8`).
void kquant_vnni_pack_x8(const float* x, int64_t cols, uint8_t* out);

// The two packings one element at a time (the definitions the AVX-512 ones are tested
// against, byte for byte).
void kquant_vnni_pack_x_reference(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out);
void kquant_vnni_pack_x8_reference(const float* x, int64_t cols, uint8_t* out);

// out[r] = row r times the packed activation over `blocks` super-blocks; t a k-quant,
// R 1..4; x8: packed by kquant_vnni_pack_x8. REQUIRES q4_vnni_enabled().
void kquant_vnni_rows(DType t, const uint8_t* const* rows, int R, int64_t blocks, const uint8_t* packed, bool x8,
                      float* out, const uint8_t* pf);

// Rows [r0, r1) of a matrix (row r at W + r * rb, `blocks` super-blocks each) against
// n_tok packed activations (all kquant_vnni_pack_x8's, or all kquant_vnni_pack_x's):
// row r's product with token t into outs[t][r]. A batched decode step's tokens on one
// matrix: each row's quants and scales are unpacked once per super-block for up to four
// tokens; token t gets kquant_vnni_rows' floats. Prefetches up to pf_end. For the types
// kquant_vnni_tokens_type names (Q4_K, Q5_K, Q6_K). REQUIRES q4_vnni_enabled().
bool kquant_vnni_tokens_type(DType t);
void kquant_vnni_rows_tokens(DType t, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t blocks,
                             const uint8_t* const* packed, int n_tok, bool x8, float* const* outs,
                             const uint8_t* pf_end);

// nb blocks of t dequantised with AVX-512, bit-identical to dequantize_row; false (and
// nothing written) for types without such a path (Q4_K and Q6_K have one).
// REQUIRES q4_vnni_enabled().
bool kquant_avx512_dequant(DType t, const uint8_t* blocks, int64_t nb, float* y);

}  // namespace moeflow::cpu
