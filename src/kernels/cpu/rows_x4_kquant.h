// The interleaved layout's k-quants (tensor/rows_x4.h: Q4_K, Q5_K, Q6_K) repacked and
// dequantised with AVX-512, for rows_x4_vnni.cpp's rows_x4_repack and
// rows_x4_dequant_quad (only where the CPU has AVX-512 VNNI; the scalar references are
// tensor/rows_x4.cpp's).
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// repack_rows_x4 for t (Q4_K, Q5_K or Q6_K). REQUIRES rows_x4_fits(rows, cols).
void rows_x4_kquant_repack(DType t, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);
// rows_x4_dequant_quad for t (Q4_K, Q5_K or Q6_K): the floats dequantize_row gives.
void rows_x4_kquant_dequant(DType t, const uint8_t* quad, int64_t cols, int64_t g0, int64_t n_groups, float* out,
                            int64_t ld);

}  // namespace moeflow::cpu
