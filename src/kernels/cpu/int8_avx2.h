// Mat-vec rows of q4_0, q8_0, Q4_1, Q5_0, Q5_1, the k-quants (Q2_K .. Q6_K) and the 4-bit non-linear types
// (IQ4_NL, IQ4_XS, MXFP4) in GGUF's layout as 8-bit integer dot products with AVX2, for
// CPUs without AVX-512 VNNI (Zen 2 / Zen 3, Intel before Ice Lake, most laptops),
// against the activation quantised to int8 (`--activations int8`, and auto's choice for
// all but q8_0, which keeps int16 there).
//
// Why: without them these types convert every weight to f32 (q4_0 7-8 GB/s a core from
// cache on a Zen 3, Q4_K..Q6_K 3-4 GB/s, IQ4 3-4 GB/s, Q2_K / Q3_K 0.6 GB/s through the
// generic dequantise-then-dot path), and a batched decode step repeats all of it for
// every token. Here a 32-column block's quants are unpacked once to 32 bytes and each
// token costs `vpmaddubsw` (unsigned quant x signed int8, pairs summed in int16) and
// `vpmaddwd` (int32 lanes; by ones, or by a k-quant's integer sub-block scales).
//
// Two grids for the activation x = d_x * q_x, each with llama.cpp's choice for the type:
// - Types whose blocks of 32 carry their own float scale (q4_0, q8_0, Q4_1, Q5_0, Q5_1,
//   IQ4_NL, MXFP4):
//   int8 per 32 columns (llama.cpp's q8_0 activations); each block and token then takes
//   one conversion and one FMA with d_x times the weights' scale (q4_0 and MXFP4: one
//   per four blocks, below).
// - Types with integer sub-block scales under one float scale per 256 columns (Q2_K..Q6_K,
//   IQ4_XS): int8 per 256 columns (llama.cpp's q8_K), so the whole super-block sums in
//   int32 lanes and converts once a token. An AVX2 core's issue ports bind these kernels
//   (a conversion, a broadcast and an FMA per block and token cost about as much as the
//   two integer multiplies), so a batched step's products run 1.2-1.8x faster than on
//   the 32-column grid (docs/performance.md); the price is the activation's rounding on
//   the coarser grid (~2^-8 of the largest value of 256 columns instead of 32), which
//   did not move the built-in model's perplexity.
//
// Arithmetic:
// - q4_0: sum (n - 8) x = d_x sum n q_x - 8 d_x sum q_x (n the nibble, 0..15); the
//   second term is precomputed when packing (c = -d_x sum q_x). Four blocks go
//   together: per token each pair's two vpmaddubsw add in int16 (nibbles are small) and
//   a vphaddw adds the two pairs' neighbouring lanes, so one vpmaddwd, conversion and
//   pair of FMAs serve four blocks (2 lanes each, each lane adding 4c); on a Zen 3,
//   pairs of blocks ran 1.3-1.5x faster than single blocks, and quads 1.0-1.3x faster
//   than pairs (docs/performance.md).
// - MXFP4: as q4_0, with its levels (-12..12, doubled) plus 12 from a byte shuffle of the
//   nibbles in place of n, and 12 in place of 8.
// - q8_0, and IQ4_NL's levels (a byte shuffle of the nibbles, up to 127): signed, so
//   |q| meets q_x with q's sign (vpsignb; q_x is never -128); Q5_0's q - 16 likewise.
// - Q4_1 / Q5_1: d sum n q_x + m sum q_x, the block's sum of q_x from the same two
//   multiplies against ones (on the 32-column grid, whose packing has no sums).
// - Q4_K / Q5_K: d sum sc sum n q_x - dmin sum m sum q_x, with the 6-bit sc and m of the
//   sub-block: sc multiplies in `vpmaddwd`, m with the activation's sums per 16 columns.
// - Q2_K / Q3_K: the 2- or 3-bit quants unsigned against the 16-column sub-blocks'
//   scales in `vpmaddwd`; Q2_K's mins as Q4_K's, Q3_K's offset of 4 taken off the int32
//   sums with the activation's sums.
// - Q6_K: the 6-bit quants unsigned, their offset of 32 taken off as Q3_K's; IQ4_XS's
//   signed levels as IQ4_NL's, times the 6-bit sub-block scales minus 32.
// Every integer sum is exact (at most 2 * 127 * 127 per int16 pair, 2^27 per int32
// lane); the only rounding beyond f32 is the activation's int8 quantisation.
// Each (row, token) pair has its own accumulators and the same operations in the same
// order whatever the tile, so a token gets the same floats alone, in a batched step and
// in any grouping of rows.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/row_layout.h"

namespace moeflow::cpu {

// True when this CPU has AVX2 and FMA and these kernels are not switched off.
bool int8_avx2_enabled();
// Tests and A/B benchmarks switch them off to compare with the Highway kernels.
void set_int8_avx2_enabled(bool on);
// Whether a matrix of this type and layout on int8 activations takes these kernels:
// the types above in GGUF's layout, where they are enabled and the VNNI kernels are not
// (those take these types on a CPU that has them).
bool int8_avx2_type(DType t, RowLayout layout);

// The packed activation of a matrix of type t (cols a multiple of t's block): the int8
// values in column order (cols bytes), then
// - on the 32-column grid: per block its scale d (f32); but q4_0 and MXFP4 in quads of
//   blocks a, b, c, d (zero blocks after the last one): per quad its 128 values as
//   [a0-15 b0-15 a16-31 b16-31 c0-15 d0-15 c16-31 d16-31], then after all quads per
//   quad [d_a d_a d_c d_c d_b d_b d_d d_d] and o c in the same order (f32; c = -d sum(q),
//   o = 4 for q4_0, 6 for MXFP4, half the offset), the kernel's lane order;
// - on the 256-column grid (the k-quants, IQ4_XS): per 256 columns d (f32), then per
//   16 columns the sum of q (int16).
size_t int8_avx2_x_bytes(DType t, int64_t cols);
void int8_avx2_pack_x8(DType t, const float* x, int64_t cols, uint8_t* out);
// The same packing one element at a time: the definition the AVX2 one is tested against
// byte for byte, and the packing on CPUs without AVX2.
void int8_avx2_pack_x8_reference(DType t, const float* x, int64_t cols, uint8_t* out);

// out[r] = row r (rows[r], cols columns of t) times the packed activation, R in 1..4;
// pf, when not null, is prefetched a little at every block (the next rows' bytes, R
// rows' worth). REQUIRES int8_avx2_type(t, gguf).
void int8_avx2_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const uint8_t* packed, float* out,
                    const uint8_t* pf);

// Rows [r0, r1) of a matrix (row r at W + r * rb) against n_tok packed activations: row
// r's product with token t into outs[t][r]. A batched step's tokens on one matrix: each
// block's quants unpacked once for up to four tokens; token t gets int8_avx2_rows'
// floats. Prefetches up to pf_end. REQUIRES int8_avx2_type(t, gguf).
void int8_avx2_rows_tokens(DType t, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t cols,
                           const uint8_t* const* packed, int n_tok, float* const* outs, const uint8_t* pf_end);

}  // namespace moeflow::cpu
