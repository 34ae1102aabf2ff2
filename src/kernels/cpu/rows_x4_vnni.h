// Mat-vec kernels for q4_0 and q8_0 rows interleaved in fours (RowLayout::rows_x4;
// tensor/rows_x4.h), the layout the resident model uses on CPUs with AVX-512
// VNNI (q4_vnni_enabled()). Every (row, block) pair has its own 32-bit lane, so a
// group of 4 blocks of 4 rows needs no gather and no reduction: 4 (q4_0) or 8 (q8_0)
// aligned loads, `vpdpbusd` with the activation's bytes broadcast from 16-byte
// patterns, one scale conversion per 16 blocks.
//
// Arithmetic, exact in integers as in q4_vnni.h: the activation is quantised to int16
// per 32-element block (QuantizeX16) and split x = 256*hi + lo (hi signed, lo
// unsigned). q4_0: the nibbles (0..15) are the unsigned operand against hi and the
// signed one against lo; the offset of 8 comes off with -8 * sum(x) per block. q8_0:
// the signed weights are the signed operand against lo; against hi (both signed) they
// enter as w + 128 (`w ^ 0x80`, unsigned) and -128 * sum(hi) per block corrects it. A
// block's whole sum is exact in int32 and converted to float once; for q4_0 in the
// order the GGUF-layout VNNI kernel uses, so the two give the same floats.
//
// Why the activation is stored once per group and broadcast rather than once per lane:
// with a copy per lane (1152 bytes per group) the 2048-column activations of the
// down projections crowded the streaming weights out of L1 and the kernel streamed
// slower than the GGUF-layout one.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// The activation packed for both types: x_bytes(cols) bytes per x (cols % 128 == 0),
// from QuantizeX16's qx (int16 per element) and dx (f32 per 32-element block).
constexpr size_t kRowsX4XGroupBytes = 304;
inline size_t rows_x4_x_bytes(int64_t cols) { return static_cast<size_t>(cols / 128) * kRowsX4XGroupBytes; }
void rows_x4_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out);

// out[4i + r] = row r of quad i (at W + i * rows_x4_quad_bytes(t, cols)) times the
// packed activation, for i < n_quads; t is Q4_0 or Q8_0 (the file type). Every quad prefetches
// the one kRowsX4PrefetchQuads ahead when that starts before pf_end.
constexpr int64_t kRowsX4PrefetchQuads = 2;
void rows_x4_quads(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* xp, float* out,
                   const uint8_t* pf_end);

// n mat-vecs of the same type and width read together, a quad of each in turn, so a
// core has n memory streams in flight instead of one (what it gains in decode:
// matmul.cpp, matvec_batch); two with the same packed activation share its broadcasts. Each: its first quad, packed activation, output and
// prefetch limit, as rows_x4_quads takes them; all advance by n_quads quads.
struct RowsX4Stream {
  const uint8_t* W;
  const uint8_t* x;
  float* out;
  const uint8_t* pf_end;
};
void rows_x4_quads_multi(DType t, const RowsX4Stream* s, int n, int64_t n_quads, int64_t cols);

// One matrix against n_tok packed activations (xs[t], outputs outs[t] as
// rows_x4_quads takes them): tiles of quads by tokens (two by two for q4_0, one by up to
// four for q8_0) whose weights are loaded once per tile and whose activation broadcasts
// serve every quad of the tile; token t gets the floats rows_x4_quads gives it alone (a batched decode
// step's per-token mat-vecs, matmul.h). Prefetches as rows_x4_quads does, up to pf_end.
void rows_x4_quads_tokens(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* const* xs,
                          int n_tok, float* const* outs, const uint8_t* pf_end);

// Two matrices of one type and shape against the same n_tok packed activations (an
// expert's gate and up in a batched decode step): quad i of each read as one tile, so
// a core has two memory streams in flight and each activation broadcast serves both.
// Matrix j: its first quad W[j], token t's output outs[j][t], prefetch limit pf_end[j].
// x_int8: the activations are rows_x4_pack_x8's (else rows_x4_pack_x's). Token t gets
// the floats rows_x4_quads(8)_tokens gives it for each matrix alone.
struct RowsX4TokensPair {
  const uint8_t* W[2];
  float* const* outs[2];
  const uint8_t* pf_end[2];
};
void rows_x4_quads_tokens_pair(DType t, bool x_int8, const RowsX4TokensPair& m, int64_t n_quads, int64_t cols,
                               const uint8_t* const* xs, int n_tok);
// Whether two matrices on n_tok tokens are read faster as a pair than one after the
// other: where the single matrix's kernel already tiles two quads (the arithmetic
// binds), not for a few tokens of int8 activations (the memory stream binds, and one
// quad at a time streamed faster).
bool rows_x4_pair_pays(DType t, bool x_int8, int n_tok);

// The same products on an activation quantised to int8 per 32-element block (d =
// max|x| / 127, as llama.cpp's q8_0 activations are; `--activations int8`): one
// `vpdpbusd` per 64 weight bytes and token instead of two, and half the broadcasts, for
// a relative rounding error of the activation of ~2^-8 of its block's largest
// magnitude instead of ~2^-16. Integer sums stay exact, so a token gets the same floats
// from the one-token, paired and multi-token kernels, and in any company of tokens.
// x8_bytes(cols) bytes per packed activation.
constexpr size_t kRowsX4X8GroupBytes = 224;
inline size_t rows_x4_x8_bytes(int64_t cols) { return static_cast<size_t>(cols / 128) * kRowsX4X8GroupBytes; }
void rows_x4_pack_x8(const float* x, int64_t cols, uint8_t* out);
// rows_x4_quads, rows_x4_quads_multi and rows_x4_quads_tokens on int8-packed activations.
void rows_x4_quads8(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* xp, float* out,
                    const uint8_t* pf_end);
void rows_x4_quads8_multi(DType t, const RowsX4Stream* s, int n, int64_t n_quads, int64_t cols);
void rows_x4_quads8_tokens(DType t, const uint8_t* W, int64_t n_quads, int64_t cols, const uint8_t* const* xs,
                           int n_tok, float* const* outs, const uint8_t* pf_end);
// The activation as pack_x8 rounds it, dequantised (d * q per element, any CPU): the
// int8 products equal the weights' products with these values (tests' reference).
void rows_x4_x8_values(const float* x, int64_t cols, float* out);

// repack_rows_x4 (tensor/rows_x4.h, the reference) with AVX-512 shuffles where the CPU
// has them: the scalar one moves 4 bytes at a time, ~1 GB/s, seconds of load time for
// a model of tens of GB.
void rows_x4_repack(DType file_type, const void* src, int64_t rows, int64_t cols, void* dst);

// Columns [128 g0, 128 (g0 + n_groups)) of a quad's four rows as floats, row r at
// out + r * ld: the values dequantize_row gives for GGUF's blocks. For prefill, which
// dequantises tiles of four rows (AVX-512 shuffles where the CPU has them: rebuilding
// the blocks one 4-byte run at a time and decoding them cost prefill ~8%).
void rows_x4_dequant_quad(DType t, const uint8_t* quad, int64_t cols, int64_t g0, int64_t n_groups, float* out,
                          int64_t ld);

}  // namespace moeflow::cpu
