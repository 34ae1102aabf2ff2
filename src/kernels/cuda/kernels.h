// The CUDA backend's kernels (kernels/cuda/*.cu), callable from plain C++: every
// pointer but the host-side tables named so is device memory, and each call is queued
// on `stream` (a cudaStream_t) without waiting for it.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tensor/dtype.h"

namespace moeflow::cuda {

using Stream = void*;

// y[t * y_stride + r] = sum_c W[r][c] x[t * x_stride + c] for r < rows, t < n_tok; W in
// GGUF's layout, of a type cuda_supports (dequant_groups.cuh). Each token's sum is
// formed in the same order whatever n_tok is: a token's result never depends on the
// tokens beside it. rows_per_warp (1, 2 or 4; 0 picks by the matrix's rows and the
// device's multiprocessors) changes the speed only, never a bit of the result.
void matvec(DType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int64_t n_tok,
            float* y, int64_t y_stride, Stream stream, int rows_per_warp = 0);

// GB/s (weight bytes) of matvec streaming over copies of one matrix (`matrix`, host
// memory, GGUF's layout) that fill stream_bytes of device memory: for each entry of
// rows_per_warp, the best of three passes of at least min_seconds each. Runs on the
// current device and waits for it; throws when the memory cannot be had.
std::vector<double> matvec_stream_gbs(DType t, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t n_tok,
                                      const std::vector<int>& rows_per_warp, uint64_t stream_bytes, double min_seconds);

// Where each query token reads its sequence (attention.h's AttentionQuery with the
// block table copied to the device): table_offset indexes the device table array.
struct DeviceQuery {
  int64_t pos;
  int64_t table_offset;
};

// cpu::attention's contract over device memory: q [n_tok][n_head * head_dim], out
// [n_tok][n_head * v_dim]; scratch holds n_tok * n_head * max_keys floats, max_keys
// the most keys any token reads. sinks: device copy of the shape's sinks (or null).
void attention(const cpu::AttentionShape& s, const float* q, int64_t n_tok, const DeviceQuery* queries,
               const int32_t* tables, const void* k_cache, const void* v_cache, const float* sinks, float* scratch,
               int64_t max_keys, float* out, Stream stream);

// cpu::kv_store_columns over device memory: row r of src (n floats) to dst + r *
// dst_stride elements, element i at i * elem_stride, as f32 or f16 (nearest even).
void kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride,
              int64_t elem_stride, Stream stream);

// gate[i] = glu(gate[i] + gate_bias[i % F], up[i] + up_bias[i % F]) for i < rows * F
// (biases may be null): SwiGLU, or gpt-oss's clamped form.
void expert_glu(float* gate, const float* up, const float* gate_bias, const float* up_bias, int64_t rows, int64_t F,
                bool oai, Stream stream);
// y[r][i] += bias[i] for r < rows, i < n.
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, Stream stream);

// Decodes n elements of a row (host memory) with the kernels' own decoder, on the CPU:
// what the tests hold against dequantize_row.
void decode_row_on_host(DType t, const void* row, float* out, int64_t n);

}  // namespace moeflow::cuda
