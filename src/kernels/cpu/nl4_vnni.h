// Mat-vec rows of the 4-bit non-linear types (IQ4_NL, IQ4_XS, MXFP4: gpt-oss's experts),
// in GGUF's row layout, as 8-bit integer dot products (AVX-512 VNNI) against
// the activation quantised to int8 per 32 columns. A weight is a level from a table of
// 16 small integers (tensor/iquants.h: kIq4Levels, kMxfp4Levels doubled) times its
// 32-column block's scale (f16; IQ4_XS's f16 times a 6-bit block scale; MXFP4's power
// of two 2^(e - 128)); a vpshufb maps the nibbles
// to the levels plus an offset that makes them unsigned (127, 12), taken off with the
// activation block's sum, so a block's product is sum(level * x) exactly in integers
// and the only rounding beyond f32 is the activation's (~2^-8 of a block's largest
// value). Any number of whole blocks a row (gpt-oss's 2880 columns are 90; IQ4_XS's
// super-blocks of 256), which the interleaved layouts (multiples of 128 or 256 columns)
// do not take. The legacy 32-block types (Q4_1, Q5_0, Q5_1) take the same kernels with
// their quants as the levels (Q5_0's offset of 16 is its own), Q4_1's and Q5_1's block
// minimum added as m * dx * (the activation block's integer sum).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// IQ4_NL, IQ4_XS, MXFP4, Q4_1, Q5_0 and Q5_1 on a CPU with q4_vnni_enabled().
bool nl4_vnni_type(DType t);

// The packed activation: per pair of 32-column blocks 64 int8 values, the two blocks'
// sums (lanes 0 and 8 of 16 int32) and scales (lanes 0-7 and 8-15 of 16 floats); an
// odd last block is paired with zeros. cols a multiple of 32.
size_t nl4_x8_bytes(int64_t cols);
void nl4_pack_x8(const float* x, int64_t cols, uint8_t* out);

// out[r] = row r (rows[r], cols columns of t) times the packed activation, R in 1..4;
// pf, when not null, is prefetched a little at every pair of blocks.
// REQUIRES nl4_vnni_type(t).
void nl4_vnni_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const uint8_t* packed, float* out,
                   const uint8_t* pf);

// Rows [r0, r1) of a matrix (row r at W + r * rb) against n_tok packed activations: row
// r's product with token t into outs[t][r]. A batched step's or a prompt's tokens on one
// matrix: each row's levels and scales unpacked once for up to four tokens; token t
// gets nl4_vnni_rows' floats. Prefetches up to pf_end. REQUIRES nl4_vnni_type(t).
void nl4_vnni_rows_tokens(DType t, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t cols,
                          const uint8_t* const* packed, int n_tok, float* const* outs, const uint8_t* pf_end);

}  // namespace moeflow::cpu
