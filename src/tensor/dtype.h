// Element types with the exact ggml/GGUF block layouts.
//   F32  : 4-byte IEEE float.
//   F16  : 2-byte IEEE half.
//   BF16 : 2-byte bfloat16 (upper half of an f32).
//   Q8_0 : blocks of 32: f16 scale d, int8 q[32];          x = d * q.      34 bytes
//   Q4_0 : blocks of 32: f16 scale d, uint8 qs[16];        x = d * (nib - 8), element j
//          in the low nibble of qs[j] for j < 16, element j+16 in the high nibble.  18 bytes
//   Q4_1, Q5_0, Q5_1: blocks of 32 with a 4- or 5-bit grid, Q4_1 / Q5_1 offset by a
//          minimum (tensor/legacy_quants.h).
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: ggml's k-quants, super-blocks of 256 (tensor/kquants.h
//          has their layouts and formulas).
//   IQ4_NL, IQ4_XS, MXFP4: ggml's 4-bit non-linear types (blocks of 32 / 256 / 32;
//          tensor/iquants.h).
//   IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: ggml's lattice i-quants
//          (super-blocks of 256; tensor/iq_lattice.h), read only.
// These are the types a file names. How a matrix's rows sit in memory (GGUF's row
// order, or the backend's interleaved copy) is a separate property, RowLayout
// (tensor/row_layout.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace moeflow {

// Values are the ggml type ids, so they round-trip through GGUF unchanged.
enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  IQ1_M = 29, MXFP4 = 39,
  BF16 = 30
};

struct DTypeInfo {
  const char* name;
  int64_t block_size;  // elements per block (1 for float types)
  int64_t type_size;   // bytes per block
};

// Returns false for ggml type ids moeflow does not support.
bool dtype_from_ggml(uint32_t ggml_type, DType& out);
const DTypeInfo& dtype_info(DType t);
const char* dtype_name(DType t);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k" .. "q6_k", "iq4_nl", "iq4_xs", "mxfp4";
// returns false otherwise.
bool dtype_from_name(const std::string& name, DType& out);
bool dtype_is_quantized(DType t);
// The k-quants (Q2_K .. Q6_K): blocks of 256, so rows must be multiples of 256 columns.
inline bool dtype_is_kquant(DType t) { return t >= DType::Q2_K && t <= DType::Q6_K; }
// The lattice i-quants (tensor/iq_lattice.h): moeflow reads them, quantize_row does not
// write them.
constexpr bool dtype_is_lattice_iquant(DType t) {
  return t == DType::IQ2_XXS || t == DType::IQ2_XS || t == DType::IQ2_S || t == DType::IQ3_XXS || t == DType::IQ3_S ||
         t == DType::IQ1_S || t == DType::IQ1_M;
}
// Q4_1, Q5_0, Q5_1 (tensor/legacy_quants.h): blocks of 32, f16 scales.
constexpr bool dtype_is_legacy_quant(DType t) { return t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1; }
// Whether t is one of the enum's ggml types (a value cast from elsewhere may not be).
bool dtype_is_file_type(DType t);
// Bytes of a row of n elements. REQUIRES n % block_size == 0.
size_t row_bytes(DType t, int64_t n);

// Dequantise n elements (REQUIRES n % block_size == 0) of a row in GGUF's layout (rows
// interleaved in memory have their own accessors, tensor/rows_x4.h).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Quantise n elements (REQUIRES !dtype_is_lattice_iquant(t): std::invalid_argument) the way ggml's reference quantiser does (round to nearest,
// q8_0: d = amax/127; q4_0: d = max/-8 where max is the signed value of largest magnitude);
// q4_1, q5_0, q5_1 as ggml's reference quantisers (tensor/legacy_quants.h);
// the k-quants, IQ4_NL, IQ4_XS and MXFP4 with a scale search of their own (tensor/kquants.h,
// tensor/iquants.h).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Scalar conversions (round-to-nearest-even), the reference for the SIMD paths.
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
inline float bf16_to_fp32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Packed (alignment 1): a block may sit at any byte address (rows of a tensor are
// only 2-byte aligned, and callers may hand in sub-ranges of a buffer).
struct __attribute__((packed)) BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct __attribute__((packed)) BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
static_assert(alignof(BlockQ8_0) == 1 && alignof(BlockQ4_0) == 1);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);

}  // namespace moeflow
