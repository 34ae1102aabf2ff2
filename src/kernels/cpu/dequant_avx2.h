// Rows of the k-quants (Q2_K .. Q6_K) and of IQ4_NL, IQ4_XS and MXFP4 dequantised to f32
// with AVX2, bit-identical to dequantize_row, for the f32 tiles a prompt's mat-muls run
// on CPUs without the AVX-512 dequantisers (kquant_vnni.h). The generic path decodes one
// weight at a time in baseline (SSE2) code: on a Zen 3, IQ4_XS's dequantisation took
// as long as the mat-mul tiles themselves.
//
// Why bit-identical: the prompt's mat-muls and the reference tests compare against the
// same floats; every weight is formed with the reference's operations in its order
// (a scalar product of the super-block and sub-block scales, then one multiply, and for
// Q2_K / Q4_K / Q5_K one subtraction of the scaled min), and these functions are built
// without FMA so that no multiply and subtract are fused.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow::cpu {

// y[0, n) = the first n weights at blocks (n a multiple of t's block size). False, and
// nothing written, where t has no such path or the CPU has no AVX2.
bool dequant_avx2(DType t, const uint8_t* blocks, int64_t n, float* y);

}  // namespace moeflow::cpu
