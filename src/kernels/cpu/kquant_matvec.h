// Mat-vec rows of k-quant weights (tensor/kquants.h). With AVX-512 VNNI (q4_vnni_enabled)
// every k-quant's rows take the integer kernels of kquant_vnni.h, which read the
// activation quantised to int16 per 32 columns (matmul.cpp's QuantizeX16) and packed
// by kquant_pack_x. Otherwise Q4_K, Q5_K and Q6_K take an f32 SIMD kernel (Highway,
// kquant_hwy.cpp), and Q2_K, Q3_K the generic path: a super-block at a time dequantised
// into f32 and dotted with x. Both are exact to f32 rounding.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// Bytes of the packed activation for `cols` columns (a multiple of 256).
constexpr size_t kKquantXBlockBytes = 768;
inline size_t kquant_x_bytes(int64_t cols) { return static_cast<size_t>(cols / 256) * kKquantXBlockBytes; }

// True when t's mat-vec rows take the VNNI kernel (and so want the packed activation).
bool kquant_vnni_type(DType t);

// The f32 SIMD kernel of kquant_hwy.cpp for R rows (Q4_K, Q5_K, Q6_K; IQ4_NL, IQ4_XS
// and MXFP4 on targets with byte shuffles): false, with nothing written, for the others.
// pf (or null): the rows after these, which the IQ4 / MXFP4 kernel prefetches.
bool kquant_rows_simd(DType t, const uint8_t* const* rows, int R, int64_t cols, const float* x, float* out,
                      const uint8_t* pf = nullptr);

// Dequantises nb * 256 columns of t (k-quant blocks, or whole blocks of another type)
// into y, as dequantize_row does (bit-identical),
// with AVX-512 where q4_vnni_enabled() and t has such a path (Q4_K, Q6_K).
void kquant_dequant(DType t, const uint8_t* blocks, int64_t nb, float* y);

// Packs qx (int16 per column) and dx (f32 per 32 columns) for the VNNI kernels into out
// (64-byte aligned, kquant_x_bytes(cols) bytes).
void kquant_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out);

// The activation quantised to int8 per 32 columns and packed for the VNNI kernels
// (--activations int8), kquant_x_bytes(cols) bytes.
void kquant_pack_x8(const float* x, int64_t cols, uint8_t* out);

// out[r] = sum_c W_r[c] * x[c] for the R (1..4) rows at rows[r] (each cols columns of
// type t: a k-quant, or IQ4_NL / IQ4_XS / MXFP4, which always take the generic path).
// packed: kquant_pack_x's output (x8: kquant_pack_x8's), or null for the generic path.
// pf, when not null, is prefetched a little at every block (the next rows' bytes).
void kquant_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const float* x, const uint8_t* packed,
                 bool x8, float* out, const uint8_t* pf);

}  // namespace moeflow::cpu
